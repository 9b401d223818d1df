// OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}}. Every failure the
// server answers goes through ApiError, so clients always get this shape.

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export class ApiError extends Error {
  override readonly name = 'ApiError';

  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** 400 naming the request field at fault. */
export function invalidRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, 'invalid_request_error', param, code);
}

export function modelNotFound(model: string): ApiError {
  return new ApiError(404, `The model \`${model}\` does not exist.`, 'invalid_request_error', 'model', 'model_not_found');
}

export function unknownRoute(method: string, url: string): ApiError {
  return new ApiError(404, `Unknown request URL: ${method} ${url}.`, 'invalid_request_error', null, 'unknown_url');
}

export function bodyTooLarge(limit: number): ApiError {
  return new ApiError(413, `The request body is larger than the server's limit of ${limit} bytes.`, 'invalid_request_error', null, 'request_too_large');
}

export function internalError(message: string): ApiError {
  return new ApiError(500, message, 'server_error', null, null);
}

/** vLLM's wording, so clients that parse it keep working. */
export function promptTooLong(inputTokens: number, maxModelLen: number, param: string): ApiError {
  return invalidRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${inputTokens} ` +
      'input tokens. Please reduce the length of the input messages.',
    param,
    'context_length_exceeded',
  );
}

export function maxTokensTooLarge(maxTokens: number, inputTokens: number, maxModelLen: number, param: string): ApiError {
  return invalidRequest(
    `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ` +
      `${maxModelLen} tokens and your request has ${inputTokens} input tokens ` +
      `(${maxTokens} > ${maxModelLen} - ${inputTokens}).`,
    param,
    'context_length_exceeded',
  );
}
