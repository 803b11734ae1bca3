-- An instance is of a kind the runtime knows (operations.engine_of): a row of another kind
-- written by SQL would be shown but never run, so the database refuses it. NOT VALID: a
-- row written before this migration is not re-checked (the runtime still quarantines one
-- it cannot claim), every new or changed row is.

ALTER TABLE wf_instances
    ADD CONSTRAINT wf_instances_kind CHECK (kind IN ('machine', 'dag')) NOT VALID;
