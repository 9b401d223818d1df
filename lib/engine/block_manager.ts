// Paged KV blocks: a free list, reference counts, and a prefix cache keyed by hash chains
// over full blocks. A freed block keeps its hash until it is handed out again, so a later
// request with the same prefix (and the same adapter: `salt`) can take it back.
import { createHash } from 'node:crypto';

import { FreeList } from './free_list.js';
import type { Sequence } from './sequence.js';

export class BlockManager {
  private readonly refs: Int32Array;
  /** Hash of the full block's contents (and everything before it), if registered. */
  private readonly hashOf: (string | undefined)[];
  private readonly byHash = new Map<string, number>();
  /** Blocks with no references, least recently freed first (evicted first). */
  private readonly free: FreeList;
  queries = 0;
  hits = 0;

  constructor(readonly numBlocks: number, readonly blockSize: number, readonly prefixCache: boolean) {
    this.refs = new Int32Array(numBlocks);
    this.hashOf = new Array(numBlocks);
    this.free = new FreeList(numBlocks);
  }

  get freeBlocks(): number {
    return this.free.size;
  }

  get usedBlocks(): number {
    return this.numBlocks - this.free.size;
  }

  /** Blocks needed to hold `tokens` tokens. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  /**
   * Attaches the longest cached prefix of a waiting sequence's tokens; returns how many
   * tokens it covers. At least one token is left to compute, so the step has logits.
   */
  attachPrefix(seq: Sequence, salt: string): number {
    if (!this.prefixCache || seq.blocks.length > 0) return 0;
    const full = Math.floor((seq.length - 1) / this.blockSize);
    const blocks: number[] = [];
    for (let i = 0; i < full; i++) {
      // Hashed up to the first miss only: a chain hash past it cannot be cached. The rest
      // are made by registerFull after the step is launched, while the GPU runs it (a fresh
      // 4096-token prompt's 255 hashes took ~0.5 ms before its launch on the GPU machine).
      this.extendHashes(seq, i + 1, salt);
      const b = this.byHash.get(seq.blockHashes[i]);
      if (b === undefined) break;
      blocks.push(b);
    }
    for (const b of blocks) this.take(b);
    seq.blocks = blocks;
    seq.registeredBlocks = blocks.length;  // found by their hashes: registered already
    return blocks.length * this.blockSize;
  }

  /** Counts a request's prompt lookup once, when it is first admitted (as vLLM's metrics do). */
  countLookup(promptTokens: number, hitTokens: number): void {
    this.queries += promptTokens;
    this.hits += Math.min(hitTokens, promptTokens);
  }

  /** Gives the sequence blocks for `total` tokens; false (and no change) if too few are free. */
  reserve(seq: Sequence, total: number): boolean {
    const need = this.blocksFor(total) - seq.blocks.length;
    if (need <= 0) return true;
    if (need > this.free.size) return false;
    for (let i = 0; i < need; i++) {
      const b = this.free.first()!;
      this.dropHash(b);
      this.take(b);
      seq.blocks.push(b);
    }
    return true;
  }

  /**
   * Registers the sequence's newly full blocks so later requests can share them: blocks
   * computed whose tokens the host has read (an unread token waits for its read).
   */
  registerFull(seq: Sequence, salt: string): void {
    if (!this.prefixCache) return;
    const full = Math.floor(Math.min(seq.numComputed, seq.length - seq.unread) / this.blockSize);
    if (full <= seq.registeredBlocks) return;  // nothing newly full since the last step
    this.extendHashes(seq, full, salt);
    for (let i = seq.registeredBlocks; i < full; i++) {
      const b = seq.blocks[i];
      if (this.hashOf[b] !== undefined) continue;
      const h = seq.blockHashes[i];
      if (this.byHash.has(h)) continue;  // an identical block exists; keep the first
      this.hashOf[b] = h;
      this.byHash.set(h, b);
    }
    seq.registeredBlocks = full;
  }

  /** Drops the sequence's references; unreferenced blocks become free (cached ones stay findable). */
  release(seq: Sequence): void {
    // Freed in reverse so a sequence's tail blocks are evicted before its shared prefix.
    for (let i = seq.blocks.length - 1; i >= 0; i--) {
      const b = seq.blocks[i];
      if (--this.refs[b] === 0) this.free.push(b);
    }
    seq.blocks = [];
    seq.registeredBlocks = 0;
  }

  private take(b: number): void {
    if (this.refs[b]++ === 0) this.free.remove(b);
  }

  private dropHash(b: number): void {
    const h = this.hashOf[b];
    if (h === undefined) return;
    this.byHash.delete(h);
    this.hashOf[b] = undefined;
  }

  private extendHashes(seq: Sequence, full: number, salt: string): void {
    for (let i = seq.blockHashes.length; i < full; i++) {
      const h = createHash('sha256');
      h.update(i === 0 ? `salt:${salt}` : seq.blockHashes[i - 1]);
      h.update(Int32Array.from(seq.tokens(i * this.blockSize, (i + 1) * this.blockSize)));
      seq.blockHashes.push(h.digest('base64'));
    }
  }
}
