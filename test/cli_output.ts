// What a CLI test's commands print: stdout and stderr captured afresh for every test.
import { afterEach, beforeEach, vi } from 'vitest';

export interface Captured {
  out: string;
  err: string;
}

/** Call at the top of a test file; read `.out` and `.err` after each command. */
export function captureOutput(): Captured {
  const captured: Captured = { out: '', err: '' };
  beforeEach(() => {
    captured.out = '';
    captured.err = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => ((captured.out += String(chunk)), true));
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => ((captured.err += String(chunk)), true));
  });
  afterEach(() => vi.restoreAllMocks());
  return captured;
}
