// Turns ajv's errors into one line per problem that names the key and what it expects.
import type { ErrorObject } from 'ajv';

interface SchemaNode {
  type?: string;
  enum?: readonly unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  minLength?: number;
  properties?: Record<string, unknown>;
  const?: unknown;
  anyOf?: readonly SchemaNode[];
}

/** "an integer >= 1", "one of "auto", "cpu", "cuda"", "an integer >= 1 or "auto"", … */
export function describeExpected(node: SchemaNode): string {
  if (node.anyOf) return node.anyOf.map(describeExpected).join(' or ');
  if (node.const !== undefined) return JSON.stringify(node.const);
  if (node.enum) return `one of ${node.enum.map((v) => JSON.stringify(v)).join(', ')}`;
  switch (node.type) {
    case 'integer':
    case 'number': {
      const noun = node.type === 'integer' ? 'an integer' : 'a number';
      const bounds: string[] = [];
      if (node.exclusiveMinimum !== undefined) bounds.push(`> ${node.exclusiveMinimum}`);
      if (node.minimum !== undefined) bounds.push(`>= ${node.minimum}`);
      if (node.maximum !== undefined) bounds.push(`<= ${node.maximum}`);
      return bounds.length > 0 ? `${noun} ${bounds.join(' and ')}` : noun;
    }
    case 'string':
      return node.minLength ? 'a non-empty string' : 'a string';
    case 'boolean':
      return 'true or false';
    case 'object':
      return 'a mapping of keys';
    default:
      return 'valid';
  }
}

/** "/kv_cache/block_size" → "kv_cache.block_size". */
export function keyPath(instancePath: string, child?: string): string {
  const parts = instancePath.split('/').filter((p) => p.length > 0);
  if (child !== undefined) parts.push(child);
  return parts.join('.');
}

/**
 * One message per offending key. `labelOf` gives the source to blame (the file, or the
 * command-line flag that set that key).
 */
export function describeErrors(errors: readonly ErrorObject[], labelOf: (path: string) => string): string[] {
  const seen = new Set<string>();
  const lines: string[] = [];
  for (const e of errors) {
    // A value that fits none of anyOf's choices: the anyOf error names them all, not each choice's.
    if (e.schemaPath.includes('/anyOf/')) continue;
    let path: string;
    let text: string;
    if (e.keyword === 'additionalProperties') {
      const key = (e.params as { additionalProperty: string }).additionalProperty;
      path = keyPath(e.instancePath, key);
      const known = Object.keys((e.parentSchema as SchemaNode | undefined)?.properties ?? {});
      text = `unknown key ${path}${known.length > 0 ? ` (expected one of: ${known.join(', ')})` : ''}`;
    } else if (e.keyword === 'required') {
      path = keyPath(e.instancePath, (e.params as { missingProperty: string }).missingProperty);
      text = `${path} is required`;
    } else {
      path = keyPath(e.instancePath);
      const what = path === '' ? 'the file' : path;
      text = `${what} must be ${describeExpected((e.parentSchema ?? {}) as SchemaNode)}, got ${JSON.stringify(e.data)}`;
    }
    if (seen.has(path)) continue;
    seen.add(path);
    lines.push(`${labelOf(path)}: ${text}`);
  }
  return lines;
}
