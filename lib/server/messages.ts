// /v1/chat/completions `messages` → what the chat template takes. Content given as parts is
// flattened to text (parts joined by newlines, as vLLM's "string" content format does).
import type { ChatMessage } from '../tokenizer/chat_template.js';
import { invalidRequest } from './errors.js';

export function parseMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw invalidRequest('`messages` must be a non-empty array of messages.', 'messages');
  }
  return value.map((m, i) => parseMessage(m, `messages[${i}]`));
}

function parseMessage(m: unknown, where: string): ChatMessage {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) throw invalidRequest(`\`${where}\` must be an object.`, where);
  const message = m as Record<string, unknown>;
  if (typeof message.role !== 'string' || message.role.length === 0) {
    throw invalidRequest(`\`${where}.role\` must be a string such as "user" or "assistant".`, `${where}.role`);
  }
  return { ...message, role: message.role, content: parseContent(message.content, `${where}.content`) };
}

function parseContent(content: unknown, where: string): string | null {
  // Templates concatenate content as a string, so a missing one (e.g. beside tool_calls) is ''.
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalidRequest(`\`${where}\` must be a string or an array of content parts.`, where);
  return content
    .map((part, j) => {
      const p = part as { type?: unknown; text?: unknown } | null;
      if (typeof p !== 'object' || p === null || p.type !== 'text' || typeof p.text !== 'string') {
        const type = typeof p === 'object' && p !== null ? JSON.stringify(p.type) : 'none';
        throw invalidRequest(`\`${where}[${j}]\` must be a {"type": "text", "text": ...} part (got type ${type}); this model takes text only.`, `${where}[${j}]`);
      }
      return p.text;
    })
    .join('\n');
}
