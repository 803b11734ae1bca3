-- The trace context of the caller that started an instance (W3C traceparent/tracestate
-- as a JSON object), written by create and dag_create; the runtime's spans of the run
-- are its children, whichever process runs them. NULL: started outside any trace.
ALTER TABLE wf_instances ADD COLUMN trace_context TEXT;
