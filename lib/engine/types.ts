// The contract between the engine (on its own thread) and its callers (the HTTP thread).
import type { LoraStats } from '../lora/manager.js';

/** Per-request generation settings, already validated (see lib/server/sampling.ts). */
export interface SamplingParams {
  maxTokens: number;
  /** 0 means greedy. */
  temperature: number;
  /** 1 means no nucleus cut. */
  topP: number;
  /** 0 (or -1 on input) means no limit. */
  topK: number;
  /** Same seed, same prompt, same params: same tokens. Unseeded requests get a random seed. */
  seed: number | null;
  /** Generation stops after any of these tokens (the token is kept in the output). */
  stopTokenIds: number[];
  /** Keep generating past the model's EOS tokens. */
  ignoreEos: boolean;
  /** EOS and stop tokens are ignored until this many tokens were generated. */
  minTokens: number;
  /** null: no logprobs; k >= 0: the chosen token's logprob and the k most likely tokens. */
  logprobs: number | null;
}

export interface GenerateRequest {
  id: string;
  promptIds: number[];
  params: SamplingParams;
  /** A registered LoRA adapter's name; absent for the base model. */
  adapter?: string;
}

export type FinishReason = 'stop' | 'length' | 'abort';

export interface TokenLogprob {
  tokenId: number;
  logprob: number;
  /** The `logprobs` most likely tokens, most likely first: [tokenId, logprob]. */
  top: [number, number][];
}

/** What one engine step produced for one request. */
export interface RequestOutput {
  id: string;
  newTokenIds: number[];
  logprobs?: TokenLogprob[];
  /** Set on the request's last output. */
  finishReason?: FinishReason;
  /** With finishReason 'stop': the stop token that ended it (EOS or a stop_token_id). */
  stopTokenId?: number;
  /** Set when the engine had to end the request because of a fault (e.g. its adapter's files went away). */
  error?: string;
  promptTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedPromptTokens: number;
  outputTokens: number;
  /** On a request's first output, with tracing on (EngineOptions.trace): its times on the way. */
  trace?: EngineTrace;
}

/**
 * Where a request's first output spent its time (MSTAR_TRACE): wall-clock ms
 * (performance.timeOrigin + performance.now(), comparable across threads and processes of
 * one machine).
 */
export interface EngineTrace {
  /** The request reached the engine thread. */
  received: number;
  /** The first step() after that began and returned: as a rule the one that launched the request's step. */
  launchStart: number;
  launchEnd: number;
  /** The step() that returned this output began and returned (the launching one, where steps do not overlap). */
  readStart: number;
  readEnd: number;
  /** The output reached the HTTP thread (set there). */
  delivered?: number;
}

/** Engine counters the metrics endpoint reads. */
export interface EngineStats {
  running: number;
  waiting: number;
  kvBlocksTotal: number;
  kvBlocksUsed: number;
  preemptions: number;
  prefixCacheQueries: number;
  prefixCacheHits: number;
  steps: number;
  /** LoRA pool counters; absent when LoRA is off. */
  lora?: LoraStats & {
    /** Waiting requests whose adapter is not in a slot. */
    waitingForSlot: number;
  };
}

export interface ModelInfo {
  family: string;
  /** Longest prompt + output the engine accepts. */
  maxModelLen: number;
  vocabSize: number;
  eosTokenIds: number[];
}
