import { useCallback, useEffect, useState } from "react";
import { useLocation } from "react-router-dom";

import { getJson } from "./api.js";

// The page's own ?minutes= / ?max_records= (how far back a Kafka scan reads) go to every call.
const WINDOW_PARAMS = ["minutes", "max_records"];

// {data, error, loading, reload} of GET path?params; refetched when they change.
export function useApi(path, givenParams) {
  const search = new URLSearchParams(useLocation().search);
  const params = { ...(givenParams ?? {}) };
  for (const name of WINDOW_PARAMS) if (search.get(name)) params[name] = search.get(name);
  const key = JSON.stringify([path, params]);
  const [state, setState] = useState({ data: null, error: null, loading: true, key: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true, error: null }));
    getJson(path, params).then(
      (data) => live && setState({ data, error: null, loading: false, key }),
      (error) => live && setState({ data: null, error, loading: false, key }),
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}
