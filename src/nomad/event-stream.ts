import { EventFrameSchema, type NomadEvent } from "./schemas.js";
import { parseNomadJson } from "./json.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * Splits the body of /v1/event/stream into frames and yields their events.
 *
 * The stream is newline-delimited JSON that never ends: each line is
 * `{"Index":n,"Events":[...]}` or the heartbeat `{}`, sent on connect and every 30 s
 * (shared/nomad-api/README.md "GET /v1/event/stream"). Heartbeats carry no events and are
 * skipped; `onLine` still sees them so the caller can reset an idle timer.
 */
export async function* eventsFromNdjson(
  body: AsyncIterable<Uint8Array>,
  onLine?: () => void,
): AsyncGenerator<NomadEvent> {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of body) {
    onLine?.();
    buffered += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      yield* eventsOfLine(line);
    }
  }
  buffered += decoder.decode();
  yield* eventsOfLine(buffered.trim());
}

function* eventsOfLine(line: string): Generator<NomadEvent> {
  if (line === "" || line === "{}") return;
  let raw: unknown;
  try {
    raw = parseNomadJson(line);
  } catch (err) {
    throw new EventStreamFormatError(`event stream line is not JSON (${(err as Error).message}): ${line.slice(0, 200)}`);
  }
  const frame = EventFrameSchema.safeParse(raw);
  if (!frame.success) {
    throw new EventStreamFormatError(`event stream frame does not match Nomad's shape: ${frame.error.message.slice(0, 500)}`);
  }
  for (const event of frame.data.Events ?? []) yield event;
}

export class EventStreamFormatError extends SlotpoolError {
  override name = "EventStreamFormatError";
}
