// The checkpoint's tokenizer (tokenizer.json through @huggingface/tokenizers) plus the facts
// around it that live in other files: BOS/EOS, add_bos_token and the chat template.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';

import { type ChatTemplate, loadChatTemplate } from './chat_template.js';
import { type JsonObject, resolveSpecialTokens } from './special_tokens.js';

export interface TokenizerFiles {
  /** Parsed tokenizer.json. */
  tokenizerJson: JsonObject;
  tokenizerConfig?: JsonObject;
  generationConfig?: JsonObject;
  modelConfig?: JsonObject;
  chatTemplate?: ChatTemplate | null;
}

export interface EncodeOptions {
  /**
   * Add the tokenizer's special tokens (BOS for Llama). Completions do, as vLLM does by
   * default; chat does not, because the template already wrote them.
   */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens such as <|im_end|> from the text (vLLM's default for outputs). */
  skipSpecialTokens?: boolean;
}

export class Tokenizer {
  readonly bosToken: string | null;
  readonly bosTokenId: number | null;
  readonly eosToken: string | null;
  readonly eosTokenIds: readonly number[];
  readonly chatTemplate: ChatTemplate | null;
  /** Highest token id + 1 (vocabulary and added tokens). */
  readonly vocabSize: number;

  private readonly hf: HfTokenizer;
  private readonly specialIds: ReadonlySet<number>;
  /** tokenizer_config's add_bos_token / add_eos_token when set (they override the post-processor). */
  private readonly addBos: boolean | undefined;
  private readonly addEos: boolean | undefined;

  /** Loads tokenizer.json, tokenizer_config.json, generation_config.json, config.json and the chat template. */
  static load(dir: string): Tokenizer {
    const file = join(dir, 'tokenizer.json');
    if (!existsSync(file)) throw new Error(`${dir} has no tokenizer.json (mstar needs the fast-tokenizer file)`);
    const tokenizerConfig = readJson(join(dir, 'tokenizer_config.json')) ?? {};
    return new Tokenizer({
      tokenizerJson: readJson(file) ?? {},
      tokenizerConfig,
      generationConfig: readJson(join(dir, 'generation_config.json')) ?? {},
      modelConfig: readJson(join(dir, 'config.json')) ?? {},
      chatTemplate: loadChatTemplate(dir, tokenizerConfig),
    });
  }

  constructor(files: TokenizerFiles) {
    const config = files.tokenizerConfig ?? {};
    this.hf = new HfTokenizer(files.tokenizerJson, config);
    const special = resolveSpecialTokens(
      config,
      files.generationConfig ?? {},
      files.modelConfig ?? {},
      (t) => this.hf.token_to_id(t),
      (id) => this.hf.id_to_token(id),
    );
    this.bosToken = special.bosToken;
    this.bosTokenId = special.bosTokenId;
    this.eosToken = special.eosToken;
    this.eosTokenIds = special.eosTokenIds;
    this.chatTemplate = files.chatTemplate !== undefined ? files.chatTemplate : loadChatTemplate(null, config);
    this.addBos = typeof config.add_bos_token === 'boolean' ? config.add_bos_token : undefined;
    this.addEos = typeof config.add_eos_token === 'boolean' ? config.add_eos_token : undefined;

    const special_ = new Set<number>();
    let maxId = -1;
    for (const [id, token] of this.hf.get_added_tokens_decoder()) {
      if (token.special) special_.add(id);
      maxId = Math.max(maxId, id);
    }
    for (const id of this.hf.get_vocab(true).values()) maxId = Math.max(maxId, id);
    this.specialIds = special_;
    this.vocabSize = maxId + 1;
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const addSpecial = opts.addSpecialTokens ?? true;
    const processed = this.hf.encode(text, { add_special_tokens: addSpecial }).ids;
    if (!addSpecial || (this.addBos === undefined && this.addEos === undefined)) return processed;
    // transformers rebuilds the post-processor from add_bos_token/add_eos_token (Llama 2 style
    // configs); doing the same keeps the prompt identical to what vLLM feeds the model.
    const ids = this.hf.encode(text, { add_special_tokens: false }).ids;
    const bos = this.bosTokenId;
    const eos = this.eosTokenIds[0];
    const postAddedBos = bos !== null && processed[0] === bos && ids[0] !== bos;
    const postAddedEos = eos !== undefined && processed.at(-1) === eos && ids.at(-1) !== eos;
    if ((this.addBos ?? postAddedBos) && bos !== null) ids.unshift(bos);
    if ((this.addEos ?? postAddedEos) && eos !== undefined) ids.push(eos);
    return ids;
  }

  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    const skip = opts.skipSpecialTokens ?? true;
    // Unknown ids decode to nothing rather than throwing inside the library.
    const known = ids.filter((id) => this.hf.id_to_token(id) !== undefined && !(skip && this.specialIds.has(id)));
    if (known.length === 0) return '';
    // Cleaning up spaces (" ." → ".") would make incremental decoding disagree with itself.
    return this.hf.decode(known, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /** One token's own text, special tokens included: what logprobs show for it. */
  tokenText(id: number): string {
    return this.decode([id], { skipSpecialTokens: false });
  }

  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }
}

function readJson(file: string): JsonObject | null {
  if (!existsSync(file)) return null;
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error(`${file} is not a JSON object`);
  return value as JsonObject;
}
