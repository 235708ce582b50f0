import { Text } from "@chakra-ui/react";

// "3 min ago" (or "in 2 s") for an ISO time; the exact UTC value is the element's title.
export function ago(value, now = Date.now()) {
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  const seconds = (now - at) / 1000;
  const size = Math.abs(seconds);
  let text;
  if (size < 45) text = `${Math.round(size)} s`;
  else if (size < 45 * 60) text = `${Math.round(size / 60)} min`;
  else if (size < 36 * 3600) text = `${Math.round(size / 3600)} h`;
  else text = `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}

export function exact(value) {
  const at = Date.parse(value);
  return Number.isNaN(at) ? String(value) : new Date(at).toISOString().replace(".000Z", "Z");
}

export function Time({ value }) {
  if (value === undefined || value === null || value === "") return <Text as="span">-</Text>;
  const shown = ago(value);
  if (shown === null) return <Text as="span">{String(value)}</Text>;
  return (
    <Text as="time" dateTime={exact(value)} title={exact(value)} className="human-time">
      {shown}
    </Text>
  );
}
