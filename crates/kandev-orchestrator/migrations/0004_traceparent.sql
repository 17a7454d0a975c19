-- The trace context (W3C `traceparent`) of what queued the run, so its
-- launch continues that trace however long it waits in the queue.
ALTER TABLE executions ADD COLUMN traceparent text NOT NULL DEFAULT '';
