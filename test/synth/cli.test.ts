// `mstar synth` on the command line: writes and reports, or refuses bad input with exit code 2.
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { HELP, runCli } from '../../lib/cli/cli.js';
import { captureOutput } from '../cli_output.js';
import { removeTempDirs, tempDir, TINY_CONFIG } from './tiny.js';

const io = captureOutput();
afterAll(removeTempDirs);

function configFile(extra: Record<string, unknown> = {}): string {
  const file = join(tempDir('synth-cfg'), 'config.json');
  writeFileSync(file, JSON.stringify({ ...TINY_CONFIG, ...extra }));
  return file;
}

describe('mstar synth', () => {
  it('is listed, and shows its flags', async () => {
    expect(HELP).toMatch(/synth\s+write a random-weight checkpoint/);
    expect(HELP).toMatch(/bench\s+benchmark an OpenAI-compatible endpoint/);
    expect(await runCli(['synth', '--help'])).toBe(0);
    expect(io.out).toMatch(/--preset NAME\s+qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.2-1b, llama-3.2-3b/);
  });

  it('writes a checkpoint, adapters and serve.yaml from a config.json', async () => {
    const dir = tempDir('synth-cli');
    expect(await runCli(['synth', '--config', configFile(), '--out', dir, '--adapters', '2', '--rank', '4', '--targets', 'q_proj,v_proj', '--layers', '1'])).toBe(0);
    expect(io.out).toMatch(/wrote qwen3 checkpoint to .*: 1 layers, hidden 64, vocab 1000/);
    expect(io.out).toMatch(/wrote 2 adapters \(rank 4, alpha 32, q_proj,v_proj/);
    expect(io.out).toMatch(/bench: mstar bench --serve .*serve\.yaml/);
    expect(readdirSync(dir).sort()).toEqual(
      ['adapters', 'config.json', 'generation_config.json', 'model.safetensors', 'serve.yaml', 'tokenizer.json', 'tokenizer_config.json']);
  });

  it('refuses bad input with exit code 2 before writing', async () => {
    const cases: [string[], RegExp][] = [
      [['--out', tempDir('x')], /exactly one of --preset NAME or --config FILE/],
      [['--preset', 'qwen3-0.6b', '--config', 'c.json', '--out', 'x'], /exactly one of/],
      [['--preset', 'gpt-5', '--out', tempDir('x')], /unknown preset "gpt-5"/],
      [['--preset', 'qwen3-0.6b'], /--out DIR is required/],
      [['--preset', 'qwen3-0.6b', '--out', tempDir('x'), '--rank', '0'], /--rank expects an integer >= 1/],
      [['--preset', 'qwen3-0.6b', '--out', tempDir('x'), '--rank', '1000'], /--rank 1000 is above 512/],
      [['--config', configFile(), '--out', tempDir('x'), '--adapters', '1', '--targets', 'q_prj'], /q_prj is not a module of the qwen3 model/],
      [['--config', configFile({ vocab_size: 100 }), '--out', tempDir('x')], /vocab_size 100 is too small/],
      [['--config', configFile({ model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] }), '--out', tempDir('x')], /unsupported model/],
    ];
    for (const [args, message] of cases) {
      io.err = '';
      expect(await runCli(['synth', ...args])).toBe(2);
      expect(io.err).toMatch(message);
    }
    const full = tempDir('full');
    writeFileSync(join(full, 'keep.txt'), 'x');
    expect(await runCli(['synth', '--config', configFile(), '--out', full])).toBe(2);
    expect(io.err).toMatch(/is not empty \(pass --force/);
    expect(await runCli(['synth', '--config', configFile(), '--out', full, '--force'])).toBe(0);
  });
});
