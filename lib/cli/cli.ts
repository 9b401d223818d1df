// The `mstar` command line: dispatches to one module per subcommand.
import { runBench } from './bench.js';
import { runDoctor } from './doctor.js';
import { runServe } from './serve.js';
import { runSynth } from './synth.js';

interface Command {
  summary: string;
  /** Resolves to the process exit code. */
  run(args: string[]): Promise<number>;
}

const COMMANDS: Record<string, Command> = {
  serve: { summary: 'serve a model over an OpenAI-compatible HTTP API', run: runServe },
  bench: { summary: 'benchmark an OpenAI-compatible endpoint: tok/s, TTFT, ITL, LoRA retention', run: runBench },
  synth: { summary: 'write a random-weight checkpoint (a real model\'s shapes) and LoRA adapters', run: runSynth },
  doctor: { summary: 'what mstar finds here: addon, build flags, GPUs, driver, cuBLASLt', run: runDoctor },
};

export const HELP = `usage: mstar <command> [options]

commands:
${Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(10)}${c.summary}`).join('\n')}

Run 'mstar <command> --help' for a command's options.
`;

/** Exit codes: 0 ok, 1 failure, 2 usage error (unknown command, bad flag, bad config). */
export async function runCli(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined) {
    process.stderr.write(HELP);
    return 2;
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(HELP);
    return 0;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (command === undefined) {
    process.stderr.write(`mstar: unknown command "${name}"\n\n${HELP}`);
    return 2;
  }
  return command.run(args);
}
