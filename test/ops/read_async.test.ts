// readIntoAsync: the same bytes as readInto, read on a libuv thread; errors name the file.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';

describe('readIntoAsync', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-read-'));
  const file = join(dir, 'data.bin');
  const values = Float32Array.from({ length: 100 }, (_, i) => i * 0.5 - 7);
  writeFileSync(file, Buffer.concat([Buffer.alloc(16), Buffer.from(values.buffer)]));

  it('reads f32 at an offset, converting into bf16 too, while the event loop runs', async () => {
    const f32 = addon.empty('f32', [100]);
    const bf16 = addon.empty('bf16', [100]);
    await Promise.all([addon.readIntoAsync(f32, 0, file, 16, 'f32', 100), addon.readIntoAsync(bf16, 0, file, 16, 'f32', 100)]);
    expect(Array.from(f32.toArray() as Float32Array)).toEqual(Array.from(values));
    expect(Array.from(bf16.toArray() as Float32Array)).toEqual(Array.from(addon.fromArray("bf16", [100], values).toArray() as Float32Array));
  });

  it('multiplies by a scale before the one rounding into the tensor, sync and async', async () => {
    const scale = 1 / 3;
    const want = addon.fromArray('bf16', [100], values.map((v) => Math.fround(scale * v))).toArray();
    const sync = addon.empty('bf16', [100]);
    addon.readInto(sync, 0, file, 16, 'f32', 100, scale);
    const async = addon.pinnedEmpty('bf16', [10, 10]);
    await addon.readIntoAsync(async, 0, file, 16, 'f32', 100, scale);
    expect([...sync.toArray()]).toEqual([...want]);
    expect([...async.toArray()]).toEqual([...want]);
  });

  it('keeps the memory alive when the tensor is disposed mid-read', async () => {
    const t = addon.empty('f32', [100]);
    const done = addon.readIntoAsync(t, 0, file, 16, 'f32', 100);
    t.dispose();
    await expect(done).resolves.toBeUndefined();
  });

  it('rejects with the path for a missing file or a read past the end', async () => {
    await expect(addon.readIntoAsync(addon.empty('f32', [4]), 0, join(dir, 'nope.bin'), 0, 'f32', 4)).rejects.toThrow(/nope\.bin: cannot open/);
    await expect(addon.readIntoAsync(addon.empty('f32', [100]), 0, file, 400, 'f32', 100)).rejects.toThrow(/data\.bin: unexpected end of file/);
    expect(() => addon.readIntoAsync(addon.empty('f32', [4]), 2, file, 0, 'f32', 4)).toThrow(/do not fit/);
  });
});
