// A stand-in for EngineClient: "generates" next = (last * 7 + 3) % vocab (or a scripted list),
// one token per step on a later tick, honouring the parts of SamplingParams the server relies on.
import type { EngineStats, GenerateRequest, ModelInfo, RequestOutput, TokenLogprob } from '../../lib/engine/types.js';
import type { Engine } from '../../lib/server/engine_port.js';

export interface FakeEngineOptions {
  vocabSize: number;
  eosTokenIds: number[];
  maxModelLen: number;
  /** Tokens to produce instead of the formula (after which it goes on with the formula). */
  script?: (req: GenerateRequest) => number[] | undefined;
  /** Delay between steps; 0 yields to the event loop only. */
  stepDelayMs?: number;
}

export function nextToken(last: number, vocabSize: number): number {
  return (last * 7 + 3) % vocabSize;
}

/** The fake's logprobs: a fixed function of the token, with `k` alternatives, most likely first. */
export function fakeLogprob(tokenId: number, k: number, vocabSize: number): TokenLogprob {
  const logprob = -0.25 - (tokenId % 7) / 10;
  const top: [number, number][] = [];
  for (let j = 0; j < k; j++) top.push([(tokenId + j) % vocabSize, logprob - j]);
  return { tokenId, logprob, top };
}

export class FakeEngine implements Engine {
  readonly info: ModelInfo;
  readonly requests: GenerateRequest[] = [];
  readonly aborted: string[] = [];
  readonly current: EngineStats = {
    running: 0, waiting: 0, kvBlocksTotal: 100, kvBlocksUsed: 0, preemptions: 0, prefixCacheQueries: 0, prefixCacheHits: 0, steps: 0,
  };
  private readonly abortSet = new Set<string>();
  private readonly abortListeners = new Map<string, () => void>();

  constructor(private readonly opts: FakeEngineOptions) {
    this.info = { family: 'fake', maxModelLen: opts.maxModelLen, vocabSize: opts.vocabSize, eosTokenIds: opts.eosTokenIds };
  }

  generate(req: GenerateRequest): AsyncIterable<RequestOutput> {
    this.requests.push(req);
    return this.run(req);
  }

  abort(id: string): void {
    this.aborted.push(id);
    this.abortSet.add(id);
    this.abortListeners.get(id)?.();
  }

  stats(): EngineStats {
    return { ...this.current };
  }

  /** Resolves when `id` was aborted (or after `ms`), for tests that wait on a disconnect. */
  async waitForAbort(id: string, ms = 2000): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (!this.abortSet.has(id) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    return this.abortSet.has(id);
  }

  private async *run(req: GenerateRequest): AsyncGenerator<RequestOutput> {
    const { params } = req;
    const scripted = this.opts.script?.(req) ?? [];
    const base = { id: req.id, promptTokens: req.promptIds.length, cachedPromptTokens: 0 };
    let last = req.promptIds[req.promptIds.length - 1] ?? 0;
    let produced = 0;
    this.current.running += 1;
    try {
      for (;;) {
        await this.tick(req.id);
        if (this.abortSet.has(req.id)) {
          yield { ...base, newTokenIds: [], finishReason: 'abort', outputTokens: produced };
          return;
        }
        const token = produced < scripted.length ? scripted[produced] : nextToken(last, this.opts.vocabSize);
        produced += 1;
        last = token;
        this.current.steps += 1;
        const mayStop = produced > params.minTokens;
        const byEos = !params.ignoreEos && this.opts.eosTokenIds.includes(token);
        const stop = mayStop && (byEos || params.stopTokenIds.includes(token));
        const length = produced >= params.maxTokens;
        const out: RequestOutput = { ...base, newTokenIds: [token], outputTokens: produced };
        if (params.logprobs !== null) out.logprobs = [fakeLogprob(token, params.logprobs, this.opts.vocabSize)];
        if (stop) {
          out.finishReason = 'stop';
          out.stopTokenId = token;
        } else if (length) {
          out.finishReason = 'length';
        }
        yield out;
        if (out.finishReason !== undefined) return;
      }
    } finally {
      this.current.running -= 1;
    }
  }

  /** Waits one step, cut short by an abort so disconnect tests do not wait out the delay. */
  private tick(id: string): Promise<void> {
    const ms = this.opts.stepDelayMs ?? 0;
    return new Promise((resolve) => {
      const timer = ms > 0 ? setTimeout(done, ms) : setImmediate(done);
      function done(): void {
        resolve();
      }
      this.abortListeners.set(id, () => {
        if (ms > 0) clearTimeout(timer as NodeJS.Timeout);
        else clearImmediate(timer as NodeJS.Immediate);
        resolve();
      });
    });
  }
}
