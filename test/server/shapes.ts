// The response shapes the tests read (OpenAI's, as vLLM sends them).
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export interface ChatLogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface CompletionChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  finish_reason: string | null;
  stop_reason: string | number | null;
}

export interface CompletionResponse {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: CompletionChoice[];
  usage?: Usage;
}

export interface ChatChoice {
  index: number;
  message?: { role: string; content: string };
  delta?: { role?: string; content?: string };
  logprobs: { content: ChatLogprobEntry[] } | null;
  finish_reason: string | null;
  stop_reason?: string | number | null;
}

export interface ChatResponse {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: ChatChoice[];
  usage?: Usage;
}

export interface ErrorResponse {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export type CompletionChunk = CompletionResponse;
export type ChatChunk = ChatResponse;
