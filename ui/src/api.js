// The view's JSON API (/kafka-events/api/...), read with the browser's Airflow session (the _token
// cookie Airflow's own UI authenticates with); URLs are resolved against the page's <base>, so an
// Airflow served under a path prefix works as well.
export const API_PREFIX = "kafka-events/api";

export function apiUrl(path, params) {
  const url = new URL(`${API_PREFIX}/${path.replace(/^\//, "")}`, document.baseURI);
  for (const [key, value] of Object.entries(params ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return url.href;
}

export class ApiError extends Error {
  constructor(status, kind, message) {
    super(message);
    this.status = status;
    this.kind = kind;
  }
}

async function answer(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const detail = body?.message ?? body?.detail ?? response.statusText;
    const kind = body?.error ?? `HTTP ${response.status}`;
    throw new ApiError(response.status, kind, typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return body;
}

export async function getJson(path, params) {
  const response = await fetch(apiUrl(path, params), {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  return answer(response);
}

// A state-changing call: a form POST carrying the view's CSRF token of the signed-in user (the
// server also checks the request's Origin: the browser sends this page's own).
export async function postForm(path, fields) {
  const response = await fetch(apiUrl(path), {
    method: "POST",
    credentials: "same-origin",
    headers: { Accept: "application/json" },
    body: new URLSearchParams(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null)),
  });
  return answer(response);
}
