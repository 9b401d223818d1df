// Token ids → text, one token at a time, for one request.
import { StopStringMatcher } from './stop_strings.js';

export interface TokenDecoder {
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
}

/** Prompt tokens kept as left context: enough for decoders that drop a leading space. */
const PROMPT_CONTEXT_TOKENS = 5;
/** Forget fully decoded ids past this many, so a long generation does not keep them all. */
const COMPACT_AFTER = 256;

/**
 * vLLM's prefix/read-offset method: decode a short window that ends at the new token and
 * emit what it adds beyond the already-read part. While the window ends in U+FFFD the new
 * token is the first byte(s) of a multi-byte character, so nothing is emitted until the
 * rest arrives; a character is never sent half.
 */
export class IncrementalDetokenizer {
  private ids: number[];
  private prefixOffset = 0;
  private readOffset: number;

  constructor(
    private readonly decoder: TokenDecoder,
    promptIds: readonly number[],
    private readonly skipSpecialTokens = true,
  ) {
    this.ids = promptIds.slice(-PROMPT_CONTEXT_TOKENS);
    this.readOffset = this.ids.length;
  }

  /** Adds one generated token; returns the text it completes (often '', never a split character). */
  push(tokenId: number): string {
    this.ids.push(tokenId);
    const opts = { skipSpecialTokens: this.skipSpecialTokens };
    const prefixText = this.decoder.decode(this.ids.slice(this.prefixOffset, this.readOffset), opts);
    const fullText = this.decoder.decode(this.ids.slice(this.prefixOffset), opts);
    if (fullText.length <= prefixText.length || fullText.endsWith('\uFFFD')) return '';
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    if (this.prefixOffset > COMPACT_AFTER) this.compact();
    return fullText.slice(prefixText.length);
  }

  private compact(): void {
    this.ids = this.ids.slice(this.prefixOffset);
    this.readOffset -= this.prefixOffset;
    this.prefixOffset = 0;
  }
}

export interface RequestDetokenizerOptions {
  /** Stop strings; the text is cut before the first one found. */
  stop?: readonly string[];
  /** Stop strings are not looked for until more than this many tokens were generated (as vLLM). */
  minTokens?: number;
  skipSpecialTokens?: boolean;
}

export interface DetokenizedStep {
  /** Text that may be sent now. */
  text: string;
  /** Set when a stop string was found: generation must end (the caller aborts the engine request). */
  stop: string | null;
}

/** One request's output text: incremental decoding followed by stop-string handling. */
export class RequestDetokenizer {
  private readonly detok: IncrementalDetokenizer;
  private readonly stops: StopStringMatcher;
  private readonly minTokens: number;
  private generated = 0;
  private fullText = '';

  constructor(decoder: TokenDecoder, promptIds: readonly number[], opts: RequestDetokenizerOptions = {}) {
    this.detok = new IncrementalDetokenizer(decoder, promptIds, opts.skipSpecialTokens ?? true);
    this.stops = new StopStringMatcher((opts.stop ?? []).filter((s) => s.length > 0));
    this.minTokens = opts.minTokens ?? 0;
  }

  /**
   * Feeds one generated token. `countOnly` counts the token without decoding it: the EOS or
   * stop token that ended generation is not part of the text (vLLM's default).
   */
  push(tokenId: number, countOnly = false): DetokenizedStep {
    this.generated += 1;
    if (countOnly) return { text: '', stop: null };
    const step = this.stops.push(this.detok.push(tokenId), this.generated > this.minTokens);
    this.fullText += step.text;
    return step;
  }

  /** Generation ended for another reason: release the text held back for a possible stop. */
  finish(): string {
    const tail = this.stops.flush();
    this.fullText += tail;
    return tail;
  }

  /** Everything released so far. */
  get text(): string {
    return this.fullText;
  }
}
