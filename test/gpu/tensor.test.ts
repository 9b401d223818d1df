// CUDA tensors: allocation, transfers both ways, views, file reads through pinned
// staging, one-device and dtype rules, and the run-time libraries.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, expect, it } from 'vitest';

import { addon, describeGpu, expectOpError, expectSame, floats, onCpu, onCuda, Rng, rounded, type Tensor } from './helpers.js';

describeGpu('cuda tensors', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-gpu-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reports the device and the libraries it loaded', () => {
    expect(addon.buildInfo().cuda).toBe(true);
    expect(addon.cudaDevices().count).toBeGreaterThan(0);
    const libs = addon.cudaLibraries();
    console.log('cudaLibraries:', JSON.stringify(libs));
    expect(typeof libs.cublasLt.loaded).toBe('boolean');
    if (!libs.cublasLt.loaded) expect(libs.cublasLt.error).toMatch(/libcublasLt/);
  });

  it('cudaReadBandwidth reads a buffer past L2 at HBM speed, leaves free memory as it was, and checks its arguments', () => {
    addon.synchronize();
    const before = addon.cudaMemInfo().free;
    const gbps = addon.cudaReadBandwidth(2 ** 30, 3);
    console.log(`HBM read bandwidth: ${gbps.toFixed(0)} GB/s`);
    // Any HBM GPU reads hundreds of GB/s at least; L2 speeds (tens of TB/s) would mean the buffer was cached.
    expect(gbps).toBeGreaterThan(200);
    expect(gbps).toBeLessThan(12000);
    expect(addon.cudaMemInfo().free).toBeGreaterThanOrEqual(before - 64 * 2 ** 20);
    expect(() => addon.cudaReadBandwidth(8, 3)).toThrow(/bytes in \[16, 1e12\]/);
    expect(() => addon.cudaReadBandwidth(2 ** 20, 0.5)).toThrow(/passes an integer/);
  });

  it.each(['f32', 'bf16', 'f16'] as const)('%s: fromArray, toArray and to() round trips', (dtype) => {
    const data = new Rng(1).floats(1000, -100, 100);
    const t = addon.fromArray(dtype, [10, 100], data, 'cuda');
    expect(t.device).toBe('cuda');
    expect(t.dtype).toBe(dtype);
    expectSame(floats(t), rounded(dtype, data));
    const back = t.to('cpu');
    expect(back.device).toBe('cpu');
    expectSame(floats(back), rounded(dtype, data));
    const again = back.to('cuda').to('cuda');
    expectSame(floats(again), rounded(dtype, data));
  });

  it('i32 and i64 round trips, zeros, copyFrom', () => {
    const ints = Int32Array.from({ length: 77 }, (_, i) => i * 7919 - 300000);
    expectSame(addon.fromArray('i32', [77], ints, 'cuda').to('cpu').toArray() as Int32Array, ints);
    const longs = BigInt64Array.from({ length: 5 }, (_, i) => BigInt(i) * 2n ** 40n - 3n);
    expect(Array.from(addon.fromArray('i64', [5], longs, 'cuda').toArray() as BigInt64Array)).toEqual(Array.from(longs));
    const z = addon.zeros('bf16', [3, 5], 'cuda');
    expectSame(floats(z), new Float32Array(15));
    const raw = Uint16Array.from({ length: 15 }, (_, i) => 0x3f80 + i);  // bf16 bit patterns
    z.copyFrom(raw);
    expectSame(floats(z), floats(addon.fromArray('bf16', [15], raw)));
    z.copyFrom(new Float32Array(15).fill(2.5));
    expectSame(floats(z), new Float32Array(15).fill(2.5));
    expect(addon.empty('f32', [0, 4], 'cuda').toArray().length).toBe(0);
  });

  it('views and narrows of a cuda tensor read the right elements', () => {
    const data = Float32Array.from({ length: 24 }, (_, i) => i);
    const t = onCuda('f32', [6, 4], data);
    expectSame(floats(t.narrow(2, 3)), data.subarray(8, 20));
    expectSame(floats(t.narrow(1, 4).view([2, 8]).narrow(1, 1)), data.subarray(12, 20));
    const copy = t.narrow(3, 2).to('cuda');
    expect(copy.shape).toEqual([2, 4]);
    expectSame(floats(copy), data.subarray(12, 20));
  });

  it('readInto fills a cuda tensor, converting, across several staging chunks', () => {
    const n = 3_000_001;  // over 8 MiB of f32: more than one pinned buffer
    const data = new Rng(5).floats(n, -4, 4);
    const path = join(dir, 'f32.bin');
    writeFileSync(path, Buffer.from(data.buffer));
    const f = addon.zeros('f32', [n + 3], 'cuda');
    addon.readInto(f, 3, path, 0, 'f32', n);
    const got = floats(f);
    expectSame(got.subarray(0, 3), new Float32Array(3));
    expectSame(got.subarray(3), data);
    const b = addon.empty('bf16', [n], 'cuda');
    addon.readInto(b, 0, path, 0, 'f32', n);
    expectSame(floats(b), rounded('bf16', data));
    // A bf16 file into f32 on the device (widened on the host first).
    const bits = addon.fromArray('bf16', [1000], data.subarray(0, 1000));
    const bfPath = join(dir, 'bf16.bin');
    const raw = new Uint16Array(1000);
    for (let i = 0; i < 1000; ++i) raw[i] = bfBits(floats(bits)[i]);
    writeFileSync(bfPath, Buffer.from(raw.buffer));
    const w = addon.empty('f32', [1000], 'cuda');
    addon.readInto(w, 0, bfPath, 0, 'bf16', 1000);
    expectSame(floats(w), floats(bits));
  });

  it('an op refuses tensors on two devices, naming the odd one', () => {
    const a = onCuda('f32', [4], [1, 2, 3, 4]);
    const b = onCpu([4], [1, 2, 3, 4]);
    const out = addon.empty('f32', [4], 'cuda');
    expectOpError(() => addon.add(out, a, b), /^add: b is on cpu but out is on cuda/);
    expectOpError(() => addon.linear(addon.empty('f32', [1, 4]), onCpu([1, 4], [1, 2, 3, 4]), onCuda('f32', [4, 4], new Float32Array(16)), null),
      /^linear: w is on cuda but out is on cpu/);
  });

  it('activations on cuda are f32 or bf16, one dtype per call', () => {
    const x = onCuda('f16', [2, 4], new Float32Array(8));
    const w = onCuda('f32', [4], [1, 1, 1, 1]);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [2, 4], 'cuda'), x, w, 1e-6), /^rmsNorm: x must be f32 or bf16 on cuda, got f16\[2, 4\]/);
    const xb = onCuda('bf16', [2, 4], new Float32Array(8));
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [2, 4], 'cuda'), xb, w, 1e-6), /^rmsNorm: out is f32\[2, 4\] but x is bf16\[2, 4\]/);
  });

  it('synchronize waits for the stream; fill, copyRegion and maxAbsDiff work on cuda', () => {
    const t = addon.empty('bf16', [300, 7], 'cuda');
    addon.fill(t, 1.5);
    addon.synchronize();
    expectSame(floats(t), new Float32Array(2100).fill(1.5));
    const u = addon.zeros('bf16', [300, 7], 'cuda');
    expect(addon.maxAbsDiff(t, u)).toBe(1.5);
    addon.fill(u, NaN);
    expect(addon.maxAbsDiff(t, u)).toBeNaN();
  });

  it('upload: pinned regions land in order with the ops around them', () => {
    const rng = new Rng(5);
    const dst = addon.zeros('bf16', [64, 48], 'cuda');
    const values = rounded('bf16', rng.floats(40 * 16, -1, 1));
    const src = addon.pinnedEmpty('bf16', [40, 16]).copyFrom(values);
    const whole = addon.zeros('bf16', [1, 64], 'cuda');
    const row = rounded('bf16', rng.floats(64, -1, 1));
    addon.fill(dst, 2);  // enqueued before: the copy lands on top of it
    addon.upload([{ dst, src, row: 20, col: 30 }, { dst: whole, src: addon.pinnedEmpty('bf16', [1, 64]).copyFrom(row) }]);
    const after = addon.empty('bf16', [64, 48], 'cuda');
    addon.copyRegion(after, dst, 0, 0, 1, false);  // enqueued after: sees the copy
    src.dispose();  // its pinned memory is freed only once the copy ran
    const want = new Float32Array(64 * 48).fill(2);
    for (let r = 0; r < 40; r++) want.set(values.subarray(r * 16, (r + 1) * 16), (20 + r) * 48 + 30);
    expectSame(floats(after), want);
    expectSame(floats(whole), row);
  });

  it('upload without join: the ops after awaitUploads() see the copy', () => {
    const values = new Rng(6).floats(1 << 20, -1, 1);
    const src = addon.pinnedEmpty('f32', [1, 1 << 20]).copyFrom(values);
    const dst = addon.zeros('f32', [1, 1 << 20], 'cuda'), seen = addon.empty('f32', [1, 1 << 20], 'cuda');
    addon.upload([{ dst, src }], false);
    addon.awaitUploads();
    addon.copyRegion(seen, dst, 0, 0, 1, false);
    expectSame(floats(seen), values);
  });

  it.each(['bf16', 'f32'] as const)('%s scatterPlan: one kernel fills the windows as the cpu does, in order with the ops around it', (dtype) => {
    const rng = new Rng(9);
    const shape = [256, 160], init = rounded(dtype, rng.floats(256 * 160, -1, 1));
    const values = rounded(dtype, rng.floats(32768, -1, 1));
    // A large window (many blocks), then 40 narrow ones of 1 to 7 columns (every unit width,
    // transposed or not; the kernel finds each block's job among them), one empty.
    const windows = (dst: Tensor, src: Tensor) => [
      { dst, rows: 256, cols: 96, src, at: 5000 },
      ...Array.from({ length: 40 }, (_, k) => ({
        dst, row: (k % 10) * 25, col: 100 + Math.floor(k / 10) * 15, rows: 20, cols: (k % 7) + 1, src, at: k * 37, transpose: k % 3 === 0,
      })),
      { dst, row: 4, rows: 0, src },
    ];
    const cpuDst = addon.fromArray(dtype, shape, init), cpuSrc = addon.fromArray(dtype, [values.length], values);
    const dst = addon.fromArray(dtype, shape, rng.floats(256 * 160, -1, 1), 'cuda'), src = addon.fromArray(dtype, [values.length], values, 'cuda');
    const plans = [addon.scatterPlan(windows(cpuDst, cpuSrc)), addon.scatterPlan(windows(dst, src))];
    expect(plans[1].regions).toBe(41);
    dst.copyFromAsync(init);  // enqueued before: the windows land on top of it
    plans.forEach((p) => p.run());
    const after = addon.empty(dtype, shape, 'cuda');
    addon.copyRegion(after, dst, 0, 0, 1, false);  // enqueued after: sees them
    expectSame(floats(after), floats(cpuDst));
    plans.forEach((p) => p.run(true));
    expectSame(floats(dst), floats(cpuDst));
    plans.forEach((p) => p.dispose());
  });
});

/** The bf16 bit pattern of a value that bf16 holds exactly. */
function bfBits(v: number): number {
  const f = new Float32Array([v]);
  return new Uint32Array(f.buffer)[0] >>> 16;
}

it('a cuda tensor on a machine without CUDA fails with the runtime reason', () => {
  if (addon.cudaDevices().count > 0) return;
  expectOpError(() => addon.empty('f32', [2], 'cuda'), /^empty: /);
});
