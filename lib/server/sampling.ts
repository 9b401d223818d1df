// Request fields → validated generation settings. Which fields exist, their ranges and
// defaults follow the OpenAI API as vLLM serves it.
import type { ModelInfo, SamplingParams } from '../engine/types.js';
import { invalidRequest, maxTokensTooLarge, promptTooLong } from './errors.js';
import { asObject, type Body, optBool, optInt, optIntArray, optNumber, optStrings } from './fields.js';

export type ApiKind = 'completions' | 'chat';

/** vLLM's default --max-logprobs. */
export const MAX_LOGPROBS = 20;
/** vLLM's default for /v1/completions when max_tokens is absent. */
const DEFAULT_COMPLETION_MAX_TOKENS = 16;

export interface RequestSettings {
  stream: boolean;
  /** stream_options.include_usage: a last chunk with usage and no choices. */
  includeUsage: boolean;
  stop: string[];
  /** Logprob tokens come back as "token_id:N" instead of text. */
  returnTokensAsTokenIds: boolean;
  /** null: no logprobs in the response; k: the chosen token plus the k most likely. */
  logprobs: number | null;
  /** Removes special tokens (e.g. <|im_end|>) from the text; vLLM's default is true. */
  skipSpecialTokens: boolean;
  /** Undefined for chat without a limit: the rest of the context. */
  maxTokens: number | undefined;
  /** The field clients used for the limit, so errors name it. */
  maxTokensParam: string;
  /** Everything but maxTokens, which needs the prompt length. */
  params: Omit<SamplingParams, 'maxTokens'>;
}

/** Fields the engine cannot honour yet: accepted at their neutral value, refused otherwise. */
const NEUTRAL: Record<string, (v: unknown) => boolean> = {
  presence_penalty: (v) => v === 0,
  frequency_penalty: (v) => v === 0,
  repetition_penalty: (v) => v === 1,
  logit_bias: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
  best_of: (v) => v === 1,
  echo: (v) => v === false,
  suffix: (v) => v === '',
  use_beam_search: (v) => v === false,
  include_stop_str_in_output: (v) => v === false,
  prompt_logprobs: () => false,
  tools: (v) => Array.isArray(v) && v.length === 0,
  response_format: (v) => typeof v === 'object' && v !== null && (v as Body).type === 'text',
  continue_final_message: (v) => v === false,
  // vLLM's structured-output extensions: ignoring them would return unconstrained text.
  guided_json: () => false,
  guided_regex: () => false,
  guided_choice: () => false,
  guided_grammar: () => false,
  structured_outputs: () => false,
};

export function parseSettings(body: Body, kind: ApiKind, info: Pick<ModelInfo, 'vocabSize'>): RequestSettings {
  for (const [field, neutral] of Object.entries(NEUTRAL)) {
    const v = body[field];
    if (v !== undefined && v !== null && !neutral(v)) {
      throw invalidRequest(`\`${field}\` is not supported by this server yet.`, field, 'unsupported_parameter');
    }
  }
  const n = optInt(body, 'n', { min: 1 });
  if (n !== undefined && n !== 1) throw invalidRequest('Only `n` = 1 is supported.', 'n');

  const stream = optBool(body, 'stream') ?? false;
  let includeUsage = false;
  if (body.stream_options !== undefined && body.stream_options !== null) {
    if (!stream) throw invalidRequest('`stream_options` can only be set when `stream` is true.', 'stream_options');
    const options = asObject(body.stream_options, 'stream_options');
    includeUsage = optBool(options, 'include_usage', 'stream_options.include_usage') ?? false;
  }

  const maxTokensParam = kind === 'chat' && body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  const requestedMax = optInt(body, maxTokensParam, { min: 1 });
  const maxTokens = requestedMax ?? (kind === 'completions' ? DEFAULT_COMPLETION_MAX_TOKENS : undefined);
  const minTokens = optInt(body, 'min_tokens', { min: 0 }) ?? 0;
  if (maxTokens !== undefined && minTokens > maxTokens) {
    throw invalidRequest(`\`min_tokens\` (${minTokens}) must be less than or equal to \`${maxTokensParam}\` (${maxTokens}).`, 'min_tokens');
  }

  const stop = optStrings(body, 'stop') ?? [];
  if (stop.some((s) => s.length === 0)) throw invalidRequest('`stop` strings must not be empty.', 'stop');

  // Above 2^31 - 1 the engine's 32-bit top-k would wrap (2^32 + 1 became greedy): any k
  // past the vocabulary keeps every token, so it is the same as no top-k.
  const topK = Math.min(optInt(body, 'top_k', { min: -1 }) ?? 0, 2 ** 31 - 1);
  return {
    stream,
    includeUsage,
    stop,
    returnTokensAsTokenIds: optBool(body, 'return_tokens_as_token_ids') ?? false,
    logprobs: parseLogprobs(body, kind),
    skipSpecialTokens: optBool(body, 'skip_special_tokens') ?? true,
    maxTokens,
    maxTokensParam,
    params: {
      temperature: optNumber(body, 'temperature', { min: 0, max: 2 }) ?? 1,
      topP: optNumber(body, 'top_p', { above: 0, max: 1 }) ?? 1,
      // -1 and 0 both mean "no top-k"; the engine takes 0.
      topK: topK < 0 ? 0 : topK,
      seed: optInt(body, 'seed') ?? null,
      stopTokenIds: optIntArray(body, 'stop_token_ids', 0, info.vocabSize - 1) ?? [],
      ignoreEos: optBool(body, 'ignore_eos') ?? false,
      minTokens,
      logprobs: null,
    },
  };
}

/** Completions: `logprobs` is a count. Chat: `logprobs` is a switch and `top_logprobs` the count. */
function parseLogprobs(body: Body, kind: ApiKind): number | null {
  if (kind === 'completions') {
    if (typeof body.logprobs === 'boolean') {
      throw invalidRequest(`\`logprobs\` must be an integer between 0 and ${MAX_LOGPROBS} for completions.`, 'logprobs');
    }
    return optInt(body, 'logprobs', { min: 0, max: MAX_LOGPROBS }) ?? null;
  }
  const enabled = optBool(body, 'logprobs') ?? false;
  const top = optInt(body, 'top_logprobs', { min: 0, max: MAX_LOGPROBS });
  if (top !== undefined && !enabled && top > 0) {
    throw invalidRequest('When using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');
  }
  return enabled ? (top ?? 0) : null;
}

/**
 * Checks the prompt against the context length and settles max_tokens: vLLM refuses a
 * request whose prompt + max_tokens exceed it, and fills the context when chat gave no limit.
 */
export function samplingParamsFor(
  settings: RequestSettings,
  promptTokens: number,
  maxModelLen: number,
  promptParam: string,
): SamplingParams {
  if (promptTokens >= maxModelLen) throw promptTooLong(promptTokens, maxModelLen, promptParam);
  const room = maxModelLen - promptTokens;
  if (settings.maxTokens !== undefined && settings.maxTokens > room) {
    throw maxTokensTooLarge(settings.maxTokens, promptTokens, maxModelLen, settings.maxTokensParam);
  }
  const maxTokens = settings.maxTokens ?? room;
  if (settings.params.minTokens > maxTokens) {
    throw invalidRequest(`\`min_tokens\` (${settings.params.minTokens}) is more than the ${maxTokens} tokens left in the context.`, 'min_tokens');
  }
  return { ...settings.params, maxTokens, logprobs: settings.logprobs };
}
