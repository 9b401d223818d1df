// The two response shapes of logprobs: legacy completions ({tokens, token_logprobs,
// top_logprobs, text_offset}) and chat ({content: [{token, logprob, bytes, top_logprobs}]}).
import type { TokenLogprob } from '../engine/types.js';

export interface TokenNamer {
  tokenText(id: number): string;
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

export interface ChatLogprobs {
  content: ChatLogprobEntry[];
}

/** -inf is not JSON; OpenAI and vLLM send -9999 instead. */
function clamp(logprob: number): number {
  return Number.isNaN(logprob) ? -9999 : Math.max(logprob, -9999);
}

const utf8 = new TextEncoder();

export class LogprobFormatter {
  /** Completions' text_offset runs across chunks, so a stream and a single response agree. */
  private offset = 0;

  constructor(
    private readonly tokenizer: TokenNamer,
    private readonly asTokenIds: boolean,
  ) {}

  /** The token as the client sees it: its text, or "token_id:N" when asked for ids. */
  label(id: number): string {
    return this.asTokenIds ? `token_id:${id}` : this.tokenizer.tokenText(id);
  }

  /** The chosen token first, then the top ones (a dict keeps one entry per token). */
  completion(lps: readonly TokenLogprob[]): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const lp of lps) {
      const token = this.label(lp.tokenId);
      out.tokens.push(token);
      out.token_logprobs.push(clamp(lp.logprob));
      const top: Record<string, number> = { [token]: clamp(lp.logprob) };
      for (const [id, logprob] of lp.top) {
        const name = this.label(id);
        if (!(name in top)) top[name] = clamp(logprob);
      }
      out.top_logprobs.push(top);
      out.text_offset.push(this.offset);
      this.offset += this.tokenizer.tokenText(lp.tokenId).length;
    }
    return out;
  }

  chat(lps: readonly TokenLogprob[]): ChatLogprobs {
    return {
      content: lps.map((lp) => ({
        ...this.entry(lp.tokenId, lp.logprob),
        top_logprobs: lp.top.map(([id, logprob]) => this.entry(id, logprob)),
      })),
    };
  }

  /** `bytes` is the UTF-8 of the token's text, as vLLM sends it (half a character shows as U+FFFD). */
  private entry(id: number, logprob: number): { token: string; logprob: number; bytes: number[] } {
    return { token: this.label(id), logprob: clamp(logprob), bytes: Array.from(utf8.encode(this.tokenizer.tokenText(id))) };
  }
}
