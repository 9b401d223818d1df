import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { HELP, runCli } from '../../lib/cli/cli.js';
import { withDemoAdapters } from '../../lib/cli/serve.js';
import { captureOutput } from '../cli_output.js';
import { TINY_QWEN3 } from './helpers.js';

const io = captureOutput();

describe('mstar', () => {
  it('lists its commands with --help', async () => {
    expect(await runCli(['--help'])).toBe(0);
    expect(io.out).toBe(HELP);
    expect(io.out).toMatch(/serve\s+serve a model/);
  });

  it('exits 2 on an unknown command or none', async () => {
    expect(await runCli(['bake'])).toBe(2);
    expect(io.err).toMatch(/^mstar: unknown command "bake"/);
    expect(await runCli([])).toBe(2);
  });

  it('serve --lora-modules replaces a demo adapter of the same name instead of calling it given twice', () => {
    const demo = [{ name: 'shout', path: '/demo/shout' }, { name: 'gpl', path: '/demo/gpl' }];
    expect(withDemoAdapters([{ name: 'shout', path: '/mine' }, { name: 'x', path: '/x' }], demo)).toEqual([
      { name: 'gpl', path: '/demo/gpl' }, { name: 'shout', path: '/mine' }, { name: 'x', path: '/x' },
    ]);
    expect(withDemoAdapters([], demo)).toEqual(demo);
  });

  it('serve --help shows its flags', async () => {
    expect(await runCli(['serve', '--help'])).toBe(0);
    expect(io.out).toMatch(/--config FILE/);
    expect(io.out).toMatch(/--port PORT/);
  });

  it('serve exits 2 on a bad flag or a bad value before starting anything', async () => {
    expect(await runCli(['serve', '--bogus'])).toBe(2);
    expect(io.err).toMatch(/Unknown option '--bogus'/);
    io.err = '';
    expect(await runCli(['serve', '--model', TINY_QWEN3, '--port', 'http'])).toBe(2);
    expect(io.err).toBe('--port: server.port must be an integer >= 0 and <= 65535, got "http"\n');
    io.err = '';
    // (`serve` alone serves the demo model; a config without a model is an error.)
    const dir = mkdtempSync(join(tmpdir(), 'mstar-cli-'));
    writeFileSync(join(dir, 'serve.yaml'), 'device: cpu\n');
    expect(await runCli(['serve', '--config', join(dir, 'serve.yaml')])).toBe(2);
    expect(io.err).toMatch(/model is required/);
    io.err = '';
    expect(await runCli(['serve', '--model', '/no/such/model'])).toBe(2);
    expect(io.err).toMatch(/is not a folder/);
  });

  it('serve names the config file when the engine cannot give what it asks for, and exits 2', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mstar-cli-')), 'serve.yaml');
    writeFileSync(file, `model: ${TINY_QWEN3}\ndevice: cpu\nmax_seq_len: 200\nkv_cache: { block_size: 16, num_blocks: 2 }\n`);
    expect(await runCli(['serve', '--config', file])).toBe(2);
    expect(io.err).toBe(`${file}: max_seq_len 200 does not fit in the KV cache (2 blocks of 16 = 32 tokens): lower max_seq_len or give kv_cache more room\n`);
  });
});
