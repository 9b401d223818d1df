// Typed readers for request JSON fields. Each failure is a 400 whose `param` names the field.
// A field set to null counts as absent, as OpenAI clients send explicit nulls.
import { invalidRequest } from './errors.js';

export type Body = Record<string, unknown>;

export function asObject(value: unknown, param: string | null): Body {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidRequest(param === null ? 'The request body must be a JSON object.' : `\`${param}\` must be an object.`, param);
  }
  return value as Body;
}

function got(value: unknown): string {
  const text = JSON.stringify(value);
  return text === undefined ? String(value) : text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function fail(param: string, expected: string, value: unknown): never {
  throw invalidRequest(`\`${param}\` must be ${expected}, got ${got(value)}.`, param);
}

export interface Range {
  min?: number;
  max?: number;
  /** The value must be strictly greater than this. */
  above?: number;
}

function rangeText(r: Range): string {
  const parts: string[] = [];
  if (r.above !== undefined) parts.push(`> ${r.above}`);
  if (r.min !== undefined) parts.push(`>= ${r.min}`);
  if (r.max !== undefined) parts.push(`<= ${r.max}`);
  return parts.join(' and ');
}

function inRange(v: number, r: Range): boolean {
  return (r.min === undefined || v >= r.min) && (r.max === undefined || v <= r.max) && (r.above === undefined || v > r.above);
}

export function optInt(body: Body, name: string, range: Range = {}, param = name): number | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || !inRange(v, range)) {
    fail(param, `an integer${range.min !== undefined || range.max !== undefined ? ` ${rangeText(range)}` : ''}`, v);
  }
  return v;
}

export function optNumber(body: Body, name: string, range: Range = {}, param = name): number | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || !inRange(v, range)) {
    fail(param, `a number${rangeText(range) ? ` ${rangeText(range)}` : ''}`, v);
  }
  return v;
}

export function optBool(body: Body, name: string, param = name): boolean | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') fail(param, 'true or false', v);
  return v;
}

export function optString(body: Body, name: string, param = name): string | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') fail(param, 'a string', v);
  return v;
}

/** Integers in [min, max], e.g. token ids below the vocabulary size. */
export function optIntArray(body: Body, name: string, min: number, max: number): number[] | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail(name, 'an array of integers', v);
  for (const x of v) {
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < min || x > max) {
      fail(name, `an array of integers between ${min} and ${max}`, x);
    }
  }
  return v as number[];
}

/** A string or an array of strings, as `stop` takes. */
export function optStrings(body: Body, name: string): string[] | undefined {
  const v = body[name];
  if (v === undefined || v === null) return undefined;
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string')) fail(name, 'a string or an array of strings', v);
  return list as string[];
}
