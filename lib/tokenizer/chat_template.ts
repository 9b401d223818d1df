// Renders OpenAI-style `messages` into a prompt with the checkpoint's own Jinja chat template.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Template } from '@huggingface/jinja';

/** A request problem (no template, template raised, bad message): the server answers 400. */
export class ChatTemplateError extends Error {
  override readonly name = 'ChatTemplateError';
}

/** One message as the template sees it: content is already flattened to text. */
export interface ChatMessage {
  role: string;
  content: string | null;
  [field: string]: unknown;
}

export interface RenderOptions {
  /** End with the assistant header so the model answers (vLLM's default). */
  addGenerationPrompt: boolean;
  bosToken: string | null;
  eosToken: string | null;
  /** `chat_template_kwargs` from the request, e.g. {enable_thinking: false} for Qwen3. */
  extra?: Record<string, unknown>;
}

export class ChatTemplate {
  private readonly parsed: Template | null;
  private readonly parseError: string | null;

  /** Parsing errors are kept, not thrown, so a broken template fails chat requests, not startup. */
  constructor(readonly source: string) {
    let parsed: Template | null = null;
    let parseError: string | null = null;
    try {
      parsed = new Template(source);
    } catch (e) {
      parseError = (e as Error).message;
    }
    this.parsed = parsed;
    this.parseError = parseError;
  }

  render(messages: ChatMessage[], opts: RenderOptions): string {
    if (this.parsed === null) {
      throw new ChatTemplateError(`the model's chat template cannot be parsed: ${this.parseError}`);
    }
    try {
      return this.parsed.render({
        ...opts.extra,
        messages,
        add_generation_prompt: opts.addGenerationPrompt,
        bos_token: opts.bosToken ?? '',
        eos_token: opts.eosToken ?? '',
      });
    } catch (e) {
      // Templates use raise_exception() to refuse e.g. a bad role order: the message is for the user.
      throw new ChatTemplateError(`the chat template could not render these messages: ${(e as Error).message}`);
    }
  }
}

/**
 * Finds the template as transformers does: a `chat_template.jinja` file wins over
 * tokenizer_config.json's `chat_template`, which is a string or a list of {name, template}
 * (then the one named "default", else the first).
 */
export function loadChatTemplate(dir: string | null, tokenizerConfig: Record<string, unknown>): ChatTemplate | null {
  if (dir !== null) {
    const file = join(dir, 'chat_template.jinja');
    if (existsSync(file)) return new ChatTemplate(readFileSync(file, 'utf8'));
  }
  const source = pickTemplate(tokenizerConfig.chat_template);
  return source === null ? null : new ChatTemplate(source);
}

function pickTemplate(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) return null;
  const named = value.filter(
    (t): t is { name: unknown; template: string } =>
      typeof t === 'object' && t !== null && typeof (t as { template?: unknown }).template === 'string',
  );
  return (named.find((t) => t.name === 'default') ?? named[0])?.template ?? null;
}

export const NO_CHAT_TEMPLATE_MESSAGE =
  'this model has no chat template (no chat_template in tokenizer_config.json and no chat_template.jinja), ' +
  'so /v1/chat/completions cannot format messages; use /v1/completions with a prompt instead';
