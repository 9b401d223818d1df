import { existsSync, mkdirSync, readFileSync, readdirSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CheckpointError } from '../../lib/checkpoint/errors.js';
import { openSafetensors } from '../../lib/checkpoint/safetensors.js';
import { writeSafetensors, type ChunkWriter } from '../../lib/checkpoint/safetensors_writer.js';
import { tempDir, writeRaw } from './helpers.js';

function bytes(n: number, seed: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff);
}

function expectCheckpointError(fn: () => unknown, ...parts: (string | RegExp)[]): CheckpointError {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(CheckpointError);
  const e = err as CheckpointError;
  expect(e.name).toBe('CheckpointError');
  for (const p of parts) expect(e.message).toMatch(p);
  return e;
}

describe('writeSafetensors + openSafetensors', () => {
  it('round-trips header, metadata, offsets and bytes for every way of giving data', async () => {
    const path = join(tempDir(), 'a.safetensors');
    const a = bytes(2 * 3 * 2, 1);
    const b = bytes(5 * 4, 2);
    const c = bytes(4 * 2, 3);
    const d = bytes(3, 4);
    function* chunks(): Generator<Uint8Array> {
      yield b.subarray(0, 7);
      yield b.subarray(7);
    }
    async function* asyncChunks(): AsyncGenerator<Uint8Array> {
      yield c.subarray(0, 1);
      yield c.subarray(1);
    }
    await writeSafetensors(path, [
      { name: 'x.weight', dtype: 'BF16', shape: [2, 3], data: a },
      { name: 'y', dtype: 'F32', shape: [5], data: chunks() },
      { name: 'z', dtype: 'I64', shape: [1], data: asyncChunks() },
      { name: 'w', dtype: 'U8', shape: [3], data: async (write: ChunkWriter) => { await write(d.subarray(0, 2)); await write(d.subarray(2)); } },
      { name: 'empty', dtype: 'F16', shape: [0, 4], data: new Uint8Array(0) },
    ], { format: 'pt' });

    const f = openSafetensors(path);
    expect((8 + f.headerLength) % 8).toBe(0);
    expect(f.metadata).toEqual({ format: 'pt' });
    expect([...f.tensors.keys()]).toEqual(['x.weight', 'y', 'z', 'w', 'empty']);
    const raw = readFileSync(path);
    expect(f.fileSize).toBe(raw.length);
    const x = f.tensors.get('x.weight')!;
    expect(x).toEqual({ file: path, key: 'x.weight', dtype: 'BF16', shape: [2, 3], offset: 8 + f.headerLength, nbytes: 12 });
    for (const [key, want] of [['x.weight', a], ['y', b], ['z', c], ['w', d]] as const) {
      const e = f.tensors.get(key)!;
      expect(new Uint8Array(raw.subarray(e.offset, e.offset + e.nbytes))).toEqual(want);
    }
    expect(f.tensors.get('empty')!.nbytes).toBe(0);
  });

  it('refuses a tensor whose data does not match its shape, and leaves no file behind', async () => {
    const dir = tempDir();
    const path = join(dir, 'bad.safetensors');
    await expect(writeSafetensors(path, [{ name: 't', dtype: 'F32', shape: [4], data: new Uint8Array(8) }]))
      .rejects.toThrow(/tensor "t": got 8 bytes but its shape \[4\] of F32 needs 16/);
    await expect(writeSafetensors(path, [{ name: 't', dtype: 'F32', shape: [1], data: new Uint8Array(8) }]))
      .rejects.toThrow(/more than the 4 bytes/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('accepts FP8 headers (known dtype) so other tensors of the file stay usable', () => {
    const path = join(tempDir(), 'f8.safetensors');
    writeRaw(path, { a: { dtype: 'F8_E4M3', shape: [4], data_offsets: [0, 4] } }, 4);
    expect(openSafetensors(path).tensors.get('a')!.dtype).toBe('F8_E4M3');
  });
});

describe('openSafetensors errors', () => {
  const header = (entries: object): object => entries;

  it('file shorter than 8 bytes', () => {
    const path = join(tempDir(), 'tiny.safetensors');
    writeFileSync(path, Buffer.alloc(5));
    expectCheckpointError(() => openSafetensors(path), path, /only 5 bytes/, /at least 8/);
  });

  it('missing file', () => {
    const path = join(tempDir(), 'nope.safetensors');
    expectCheckpointError(() => openSafetensors(path), path, /cannot open/);
  });

  it('header length past the end of the file', () => {
    const path = join(tempDir(), 'h.safetensors');
    writeRaw(path, '{}', 0, 1000n);
    expectCheckpointError(() => openSafetensors(path), path, /header length 1000 runs past the end of the file \(10 bytes/);
  });

  it('header length over 100 MB', () => {
    const path = join(tempDir(), 'huge.safetensors');
    writeRaw(path, '{}', 0, 100_000_001n);
    truncateSync(path, 8 + 100_000_001); // sparse: costs no disk
    expectCheckpointError(() => openSafetensors(path), path, /exceeds the 100000000-byte limit/);
  });

  it('bad JSON and non-object JSON', () => {
    const dir = tempDir();
    writeRaw(join(dir, 'a'), '{"x": ', 0);
    expectCheckpointError(() => openSafetensors(join(dir, 'a')), /not valid JSON/);
    writeRaw(join(dir, 'b'), '[1, 2]', 0);
    expectCheckpointError(() => openSafetensors(join(dir, 'b')), /not a JSON object/);
  });

  it('unknown dtype', () => {
    const path = join(tempDir(), 'd.safetensors');
    writeRaw(path, header({ 'm.w': { dtype: 'Q4_K', shape: [2], data_offsets: [0, 2] } }), 2);
    const e = expectCheckpointError(() => openSafetensors(path), path, /tensor "m.w": unknown dtype "Q4_K"/);
    expect(e.key).toBe('m.w');
    expect(e.file).toBe(path);
  });

  it('bad shape and bad data_offsets', () => {
    const dir = tempDir();
    writeRaw(join(dir, 'a'), header({ t: { dtype: 'F32', shape: [2, -1], data_offsets: [0, 0] } }), 0);
    expectCheckpointError(() => openSafetensors(join(dir, 'a')), /shape must be an array of non-negative integers/);
    writeRaw(join(dir, 'b'), header({ t: { dtype: 'F32', shape: [1], data_offsets: [4] } }), 4);
    expectCheckpointError(() => openSafetensors(join(dir, 'b')), /data_offsets must be \[begin, end\]/);
    writeRaw(join(dir, 'c'), header({ t: { dtype: 'F32', shape: [0], data_offsets: [4, 0] } }), 4);
    expectCheckpointError(() => openSafetensors(join(dir, 'c')), /begin after end/);
  });

  it('byte size different from shape × item size', () => {
    const path = join(tempDir(), 's.safetensors');
    writeRaw(path, header({ 'a.weight': { dtype: 'BF16', shape: [3, 4], data_offsets: [0, 12] } }), 24);
    expectCheckpointError(() => openSafetensors(path), path,
      'tensor "a.weight": data_offsets [0, 12] span 12 bytes, but shape [3, 4] of BF16 needs 24');
  });

  it('truncated file names the file, the key and both sizes', async () => {
    const path = join(tempDir(), 'model-00002-of-00003.safetensors');
    await writeSafetensors(path, [
      { name: 'model.layers.1.mlp.gate_proj.weight', dtype: 'BF16', shape: [4, 4], data: new Uint8Array(32) },
      { name: 'model.layers.1.mlp.up_proj.weight', dtype: 'BF16', shape: [4, 4], data: new Uint8Array(32) },
    ]);
    const full = readFileSync(path).length;
    truncateSync(path, full - 10);
    expectCheckpointError(() => openSafetensors(path),
      `${path}: tensor "model.layers.1.mlp.up_proj.weight" ends at byte ${full} but the file has only ${full - 10} bytes (truncated?)`);
  });

  it('overlapping tensors', () => {
    const path = join(tempDir(), 'o.safetensors');
    writeRaw(path, header({
      a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] },
      b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] },
      e: { dtype: 'F32', shape: [0], data_offsets: [8, 8] },
    }), 16);
    expectCheckpointError(() => openSafetensors(path), path, /tensors "a" \[0, 16\) and "b" \[8, 16\) overlap/);
  });

  it('a gap in the data, as a key written twice leaves (JSON keeps only its last entry)', () => {
    const path = join(tempDir(), 'd.safetensors');
    writeRaw(path, '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', 8);
    expectCheckpointError(() => openSafetensors(path), path, /no tensor holds data bytes \[0, 4\) before "a" \[4, 8\)/, /written twice/);
  });

  it('a folder where the file should be, named', () => {
    const path = join(tempDir(), 'model.safetensors');
    mkdirSync(path);
    expectCheckpointError(() => openSafetensors(path), path, /cannot (open|read) safetensors file/);
  });

  it('__metadata__ must map strings to strings', () => {
    const path = join(tempDir(), 'm.safetensors');
    writeRaw(path, header({ __metadata__: { format: 'pt', step: 3 } }), 0);
    expectCheckpointError(() => openSafetensors(path), /"__metadata__" entry "step" must be a string/);
  });

  it('never reads tensor bytes: a huge sparse data region opens instantly', () => {
    const path = join(tempDir(), 'big.safetensors');
    const n = 1024 * 1024 * 1024; // 1 GiB of F32, sparse
    writeRaw(path, header({ t: { dtype: 'F32', shape: [n / 4], data_offsets: [0, n] } }), 0);
    truncateSync(path, readFileSync(path).length + n);
    expect(openSafetensors(path).tensors.get('t')!.nbytes).toBe(n);
    expect(existsSync(path)).toBe(true);
  });
});
