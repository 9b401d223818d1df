import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { CheckpointError, formatShape } from './errors.js';
import { ITEM_SIZE, SAFETENSORS_DTYPES, isSafetensorsDtype, type SafetensorsDtype } from './dtype.js';

/** One tensor of a safetensors file: where its bytes are, never the bytes themselves. */
export interface TensorEntry {
  /** Path of the file holding the tensor, as given to openSafetensors. */
  readonly file: string;
  readonly key: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  /** Absolute byte offset of the first element in the file (8 + header length + begin). */
  readonly offset: number;
  readonly nbytes: number;
}

export interface SafetensorsFile {
  readonly path: string;
  readonly fileSize: number;
  /** Length of the JSON header in bytes (the little-endian u64 at the start of the file). */
  readonly headerLength: number;
  /** `__metadata__` of the header ({} when absent). */
  readonly metadata: Readonly<Record<string, string>>;
  /** Tensors in header order. */
  readonly tensors: ReadonlyMap<string, TensorEntry>;
}

/** The reference implementation refuses headers above this (safetensors MAX_HEADER_SIZE). */
export const MAX_HEADER_LENGTH = 100_000_000;

/**
 * Reads and validates the header of a safetensors file. Only the first 8 + N bytes are read:
 * tensor bytes are left for the native addon, which reads them by offset.
 */
export function openSafetensors(path: string): SafetensorsFile {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    throw new CheckpointError(`cannot open safetensors file: ${(e as Error).message}`, { file: path });
  }
  try {
    const fileSize = fstatSync(fd).size;
    const headerLength = readHeaderLength(fd, path, fileSize);
    const header = readHeaderJson(fd, path, headerLength);
    return parseHeader(path, fileSize, headerLength, header);
  } finally {
    closeSync(fd);
  }
}

function readExactly(fd: number, length: number, position: number, path: string): Buffer {
  const buf = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    let n: number;
    try {
      n = readSync(fd, buf, done, length - done, position + done);
    } catch (e) {
      throw new CheckpointError(`cannot read safetensors file: ${(e as Error).message}`, { file: path });
    }
    if (n === 0) break;
    done += n;
  }
  return buf.subarray(0, done);
}

function readHeaderLength(fd: number, path: string, fileSize: number): number {
  if (fileSize < 8) {
    throw new CheckpointError(
      `file has only ${fileSize} bytes, too small for a safetensors header (at least 8 bytes)`, { file: path });
  }
  const n = readExactly(fd, 8, 0, path).readBigUInt64LE(0);
  if (n > BigInt(fileSize - 8)) {
    throw new CheckpointError(
      `header length ${n} runs past the end of the file (${fileSize} bytes, so at most ${fileSize - 8}); ` +
      'truncated, or not a safetensors file?', { file: path });
  }
  if (n > BigInt(MAX_HEADER_LENGTH)) {
    throw new CheckpointError(`header length ${n} exceeds the ${MAX_HEADER_LENGTH}-byte limit`, { file: path });
  }
  return Number(n);
}

function readHeaderJson(fd: number, path: string, headerLength: number): Record<string, unknown> {
  const text = readExactly(fd, headerLength, 8, path).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new CheckpointError(`header is not valid JSON: ${(e as Error).message}`, { file: path });
  }
  if (!isPlainObject(parsed)) {
    throw new CheckpointError('header is not a JSON object', { file: path });
  }
  return parsed;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseHeader(
  path: string, fileSize: number, headerLength: number, header: Record<string, unknown>,
): SafetensorsFile {
  const dataStart = 8 + headerLength;
  let metadata: Record<string, string> = {};
  const tensors = new Map<string, TensorEntry>();
  for (const [key, raw] of Object.entries(header)) {
    if (key === '__metadata__') {
      metadata = parseMetadata(path, raw);
      continue;
    }
    tensors.set(key, parseEntry(path, fileSize, dataStart, key, raw));
  }
  checkNoOverlap(path, dataStart, [...tensors.values()]);
  return { path, fileSize, headerLength, metadata, tensors };
}

function parseMetadata(path: string, raw: unknown): Record<string, string> {
  if (!isPlainObject(raw)) {
    throw new CheckpointError('"__metadata__" must be an object mapping strings to strings', { file: path });
  }
  for (const [k, v] of Object.entries(raw)) {
    if (typeof v !== 'string') {
      throw new CheckpointError(
        `"__metadata__" entry "${k}" must be a string, got ${JSON.stringify(v)}`, { file: path });
    }
  }
  return raw as Record<string, string>;
}

function parseEntry(path: string, fileSize: number, dataStart: number, key: string, raw: unknown): TensorEntry {
  const where = { file: path, key };
  const bad = (detail: string): CheckpointError => new CheckpointError(`tensor "${key}": ${detail}`, where);
  if (!isPlainObject(raw)) throw bad('header entry is not an object');

  const dtype = raw['dtype'];
  if (typeof dtype !== 'string' || !isSafetensorsDtype(dtype)) {
    throw bad(`unknown dtype ${JSON.stringify(dtype)} (known: ${SAFETENSORS_DTYPES.join(', ')})`);
  }
  const shape = raw['shape'];
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw bad(`shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
  }
  const offsets = raw['data_offsets'];
  if (!Array.isArray(offsets) || offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
    throw bad(`data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offsets)}`);
  }
  const [begin, end] = offsets as [number, number];
  if (begin > end) throw bad(`data_offsets [${begin}, ${end}] has begin after end`);

  const dims = shape as number[];
  const nbytes = dims.reduce((a, d) => a * d, 1) * ITEM_SIZE[dtype];
  if (end - begin !== nbytes) {
    throw bad(
      `data_offsets [${begin}, ${end}] span ${end - begin} bytes, but shape ${formatShape(dims)} of ${dtype} ` +
      `needs ${nbytes}`);
  }
  if (dataStart + end > fileSize) {
    throw new CheckpointError(
      `tensor "${key}" ends at byte ${dataStart + end} but the file has only ${fileSize} bytes (truncated?)`, where);
  }
  return { file: path, key, dtype, shape: dims, offset: dataStart + begin, nbytes };
}

/**
 * The tensors' bytes neither overlap nor leave gaps: safetensors writes them back to back
 * from the start of the data (the reference reader refuses a gap). A gap is also what a key
 * written twice in the header leaves, JSON.parse keeping only its last entry.
 */
function checkNoOverlap(path: string, dataStart: number, entries: TensorEntry[]): void {
  // Empty tensors occupy no bytes, so they cannot overlap anything.
  const sorted = entries.filter((e) => e.nbytes > 0).sort((a, b) => a.offset - b.offset);
  const range = (e: TensorEntry): string => `[${e.offset - dataStart}, ${e.offset - dataStart + e.nbytes})`;
  let end = dataStart;
  for (let i = 0; i < sorted.length; i++) {
    const cur = sorted[i];
    if (i > 0 && cur.offset < end) {
      const prev = sorted[i - 1];
      throw new CheckpointError(
        `tensors "${prev.key}" ${range(prev)} and "${cur.key}" ${range(cur)} overlap`, { file: path, key: cur.key });
    }
    if (cur.offset > end) {
      throw new CheckpointError(
        `no tensor holds data bytes [${end - dataStart}, ${cur.offset - dataStart}) before "${cur.key}" ${range(cur)} ` +
        '(safetensors data has no gaps; is a key written twice in the header?)', { file: path, key: cur.key });
    }
    end = cur.offset + cur.nbytes;
  }
}
