-- The trace context (W3C `traceparent`) of the request that made the
-- change, published with the event so its consumers continue the trace.
ALTER TABLE outbox ADD COLUMN traceparent text NOT NULL DEFAULT '';
