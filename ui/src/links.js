// Where things are in Airflow's UI (its React Router paths) and in this view (url_route paths).
export const VIEW_ROUTE = "/plugin/kafka-events";

const seg = (value) => encodeURIComponent(String(value));

export const airflow = {
  dag: (dagId) => `/dags/${seg(dagId)}`,
  dagRun: (dagId, runId) => `/dags/${seg(dagId)}/runs/${seg(runId)}`,
  taskInstance: (dagId, runId, taskId, mapIndex) => {
    const base = `/dags/${seg(dagId)}/runs/${seg(runId)}/tasks/${seg(taskId)}`;
    const index = Number(mapIndex);
    return Number.isInteger(index) && index >= 0 ? `${base}/mapped/${index}` : base;
  },
  asset: (assetId) => `/assets/${seg(assetId)}`,
};

export const view = {
  tab: (tab) => `${VIEW_ROUTE}/${tab}`,
  stream: (streamId, partition, offset) => {
    const query = new URLSearchParams();
    if (partition !== undefined && partition !== null) query.set("partition", String(partition));
    if (offset !== undefined && offset !== null) query.set("offset", String(offset));
    const text = query.toString();
    return `${VIEW_ROUTE}/streams/${seg(streamId)}${text ? `?${text}` : ""}`;
  },
  deadLetter: (partition, offset) => `${VIEW_ROUTE}/dead-letters/${seg(partition)}/${seg(offset)}`,
  assetEvent: (eventId) => `${VIEW_ROUTE}/asset-events?event_id=${seg(eventId)}`,
};
