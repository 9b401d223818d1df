/** Where a checkpoint problem was found: the file (full path) and, when known, the tensor key. */
export interface CheckpointErrorWhere {
  file?: string;
  key?: string;
}

/**
 * Every problem with a checkpoint on disk (safetensors headers, index, config.json, shapes)
 * surfaces as this one error type, so callers (CLI, adapter admin routes) can show the message
 * as-is: it always starts with the file path, and the detail names the key when there is one.
 */
export class CheckpointError extends Error {
  readonly file?: string;
  readonly key?: string;

  constructor(detail: string, where: CheckpointErrorWhere = {}) {
    super(where.file !== undefined ? `${where.file}: ${detail}` : detail);
    this.name = 'CheckpointError';
    if (where.file !== undefined) this.file = where.file;
    if (where.key !== undefined) this.key = where.key;
  }
}

/** `[a, b]` — how shapes appear in every message. */
export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}
