// What an OpenAI-compatible endpoint serves, from GET /v1/models: the base model, and the
// adapters (entries with a `parent`, as vLLM and mstar list LoRA adapters).

export interface EndpointModels {
  base: string | undefined;
  adapters: string[];
}

export async function listModels(url: string, apiKey?: string): Promise<EndpointModels> {
  const res = await fetch(`${url}/v1/models`, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {} });
  if (!res.ok) throw new Error(`GET ${url}/v1/models: HTTP ${res.status}`);
  const body = await res.json() as { data?: { id?: unknown; parent?: unknown }[] };
  const models = (body.data ?? []).filter((m): m is { id: string; parent?: unknown } => typeof m.id === 'string');
  return {
    base: models.find((m) => m.parent == null)?.id,
    adapters: models.filter((m) => m.parent != null).map((m) => m.id),
  };
}
