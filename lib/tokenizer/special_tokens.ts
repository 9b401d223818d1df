// Where a checkpoint names its BOS/EOS tokens: tokenizer_config.json (as a string or an
// AddedToken-like {content}), generation_config.json and config.json (ids, EOS maybe a list).

export type JsonObject = Record<string, unknown>;

/** tokenizer_config.json writes special tokens either as "…" or as {"content": "…", …}. */
export function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as JsonObject).content === 'string') {
    return (value as JsonObject).content as string;
  }
  return null;
}

/** `eos_token_id` may be a number, a list of numbers, or absent. */
export function tokenIds(value: unknown): number[] {
  if (Number.isInteger(value)) return [value as number];
  if (Array.isArray(value)) return value.filter((v): v is number => Number.isInteger(v));
  return [];
}

export interface SpecialTokens {
  bosToken: string | null;
  bosTokenId: number | null;
  eosToken: string | null;
  /** Every id that ends generation, the tokenizer's own EOS first. */
  eosTokenIds: number[];
}

/**
 * Resolves BOS/EOS from the three files. The tokenizer config names the token text;
 * generation_config.json wins over config.json for ids because that is what `generate()`
 * (and vLLM) use, e.g. Llama 3 Instruct lists both <|end_of_text|> and <|eot_id|> there.
 */
export function resolveSpecialTokens(
  tokenizerConfig: JsonObject,
  generationConfig: JsonObject,
  modelConfig: JsonObject,
  idOf: (token: string) => number | undefined,
  textOf: (id: number) => string | undefined,
): SpecialTokens {
  let bosToken = tokenContent(tokenizerConfig.bos_token);
  let bosTokenId = bosToken === null ? null : idOf(bosToken) ?? null;
  if (bosTokenId === null) {
    bosTokenId = tokenIds(generationConfig.bos_token_id)[0] ?? tokenIds(modelConfig.bos_token_id)[0] ?? null;
    if (bosTokenId !== null) bosToken = textOf(bosTokenId) ?? null;
  }

  let eosToken = tokenContent(tokenizerConfig.eos_token);
  const eosTokenIds: number[] = [];
  const add = (id: number | undefined): void => {
    if (id !== undefined && !eosTokenIds.includes(id)) eosTokenIds.push(id);
  };
  if (eosToken !== null) add(idOf(eosToken));
  const fromFiles = tokenIds(generationConfig.eos_token_id);
  for (const id of fromFiles.length > 0 ? fromFiles : tokenIds(modelConfig.eos_token_id)) add(id);
  if (eosToken === null && eosTokenIds.length > 0) eosToken = textOf(eosTokenIds[0]) ?? null;
  return { bosToken, bosTokenId, eosToken, eosTokenIds };
}
