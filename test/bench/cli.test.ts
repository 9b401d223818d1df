// `mstar bench` refuses bad flags with exit code 2 before starting or sending anything.
import { describe, expect, it } from 'vitest';

import { runCli } from '../../lib/cli/cli.js';
import { captureOutput } from '../cli_output.js';

const io = captureOutput();

describe('mstar bench flags', () => {
  it('shows its flags and mixes', async () => {
    expect(await runCli(['bench', '--help'])).toBe(0);
    expect(io.out).toMatch(/--serve FILE/);
    expect(io.out).toMatch(/churn\s+round robin over all adapters/);
  });

  it('exits 2 on bad input', async () => {
    const cases: [string[], RegExp][] = [
      [[], /exactly one of --serve serve.yaml or --url URL/],
      [['--serve', 'a.yaml', '--url', 'http://x'], /exactly one of/],
      [['--url', 'http://127.0.0.1:1', '--mix', 'base,sometimes'], /unknown mix "sometimes"/],
      [['--url', 'http://127.0.0.1:1', '--concurrency', '0'], /--concurrency expects positive integers/],
      [['--url', 'http://127.0.0.1:1', '--rate', 'fast'], /--rate expects positive numbers/],
      [['--url', 'http://127.0.0.1:1', '--prompt-len', '9:3'], /--prompt-len expects N or MIN:MAX/],
      [['--url', 'http://127.0.0.1:1', '--requests', '4', '--duration', '2'], /--requests or --duration, not both/],
      [['--url', 'http://127.0.0.1:1', '--roofline'], /--roofline needs --serve/],
      [['--serve', '/nonexistent/serve.yaml'], /cannot read/],
      [['--bogus'], /Unknown option '--bogus'/],
      [['--url', 'http://127.0.0.1:1', '--requests', '3,100'], /--requests takes one value, got 2/],
      [['--url', 'http://127.0.0.1:1', '--rounds', '2,9'], /--rounds takes one value/],
      [['--serve', 'a.yaml', '--model', 'm'], /--model goes with --url, not --serve/],
      [['--serve', 'a.yaml', '--baseline-url', 'http://x'], /--baseline-url goes with --url/],
    ];
    for (const [args, message] of cases) {
      io.err = '';
      expect(await runCli(['bench', ...args]), args.join(' ')).toBe(2);
      expect(io.err).toMatch(message);
    }
  });
});
