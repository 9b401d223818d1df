import { open, rename, rm } from 'node:fs/promises';
import { CheckpointError, formatShape } from './errors.js';
import { ITEM_SIZE, isSafetensorsDtype, type SafetensorsDtype } from './dtype.js';

/** Appends one chunk of a tensor's bytes to the file. One call at a time: await it before the next, and leave the chunk as it is until then. */
export type ChunkWriter = (chunk: Uint8Array) => Promise<void>;

/**
 * A tensor's bytes: all at once, as a (possibly async) sequence of chunks, or as a callback
 * that pushes chunks. The chunked forms let a caller stream a tensor far larger than memory.
 */
export type TensorBytes =
  | Uint8Array
  | Iterable<Uint8Array>
  | AsyncIterable<Uint8Array>
  | ((write: ChunkWriter) => void | Promise<void>);

export interface TensorToWrite {
  name: string;
  dtype: SafetensorsDtype;
  shape: readonly number[];
  data: TensorBytes;
}

/**
 * The first 8 + N bytes of the file: the little-endian header length, then the JSON header,
 * padded with spaces so the data starts 8-byte aligned (the spec allows trailing spaces).
 */
export function encodeSafetensorsHeader(
  tensors: readonly Omit<TensorToWrite, 'data'>[], metadata?: Readonly<Record<string, string>>,
): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header['__metadata__'] = metadata;
  let offset = 0;
  for (const t of tensors) {
    const nbytes = tensorByteLength(t);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + nbytes] };
    offset += nbytes;
  }
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const padded = Math.ceil(json.length / 8) * 8;
  const out = Buffer.alloc(8 + padded, 0x20);
  out.writeBigUInt64LE(BigInt(padded), 0);
  json.copy(out, 8);
  return out;
}

/**
 * Writes a safetensors file, tensors in the given order, streaming each tensor's bytes.
 * The file appears at `path` only once complete (written to a temporary name, then renamed),
 * so a failed or interrupted write never leaves a truncated checkpoint behind.
 */
export async function writeSafetensors(
  path: string, tensors: readonly TensorToWrite[], metadata?: Readonly<Record<string, string>>,
): Promise<void> {
  validate(path, tensors, metadata);
  const header = encodeSafetensorsHeader(tensors, metadata);
  const tmp = `${path}.partial-${process.pid}`;
  const fh = await open(tmp, 'w');
  try {
    try {
      await fh.write(header);
      for (const t of tensors) {
        let written = 0;
        const expected = tensorByteLength(t);
        const write: ChunkWriter = async (chunk) => {
          written += chunk.byteLength;
          if (written > expected) {
            throw new CheckpointError(
              `tensor "${t.name}": got more than the ${expected} bytes its shape ${formatShape(t.shape)} ` +
              `of ${t.dtype} holds`, { file: path, key: t.name });
          }
          await fh.write(chunk);
        };
        await produce(t.data, write);
        if (written !== expected) {
          throw new CheckpointError(
            `tensor "${t.name}": got ${written} bytes but its shape ${formatShape(t.shape)} of ${t.dtype} ` +
            `needs ${expected}`, { file: path, key: t.name });
        }
      }
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

function tensorByteLength(t: Omit<TensorToWrite, 'data'>): number {
  return t.shape.reduce((a, d) => a * d, 1) * ITEM_SIZE[t.dtype];
}

async function produce(data: TensorBytes, write: ChunkWriter): Promise<void> {
  if (data instanceof Uint8Array) {
    await write(data);
  } else if (typeof data === 'function') {
    await data(write);
  } else if (Symbol.asyncIterator in data) {
    for await (const chunk of data) await write(chunk);
  } else {
    for (const chunk of data) await write(chunk);
  }
}

function validate(
  path: string, tensors: readonly TensorToWrite[], metadata: Readonly<Record<string, string>> | undefined,
): void {
  const seen = new Set<string>();
  for (const t of tensors) {
    const where = { file: path, key: t.name };
    if (t.name === '__metadata__' || seen.has(t.name)) {
      throw new CheckpointError(`tensor name "${t.name}" is reserved or repeated`, where);
    }
    seen.add(t.name);
    if (!isSafetensorsDtype(t.dtype)) throw new CheckpointError(`tensor "${t.name}": unknown dtype ${t.dtype}`, where);
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new CheckpointError(`tensor "${t.name}": bad shape ${formatShape(t.shape)}`, where);
    }
  }
  for (const [k, v] of Object.entries(metadata ?? {})) {
    if (typeof v !== 'string') throw new CheckpointError(`metadata "${k}" must be a string`, { file: path });
  }
}
