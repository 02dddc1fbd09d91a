-- A completion flight whose fence was lost aborts its own transaction (issue 11) by calling this
-- function, which fails with oncely's own SQLSTATE, ON001 (issue 24): the store recognises the
-- lost fence by that code, whatever language the server writes its messages in, and never takes
-- a failure of the caller's statements for one. Class ON lies beyond the standard classes (0-4,
-- A-H) and PostgreSQL uses none by that name. It never returns; boolean is the type of the
-- CASE it is called in. Additive: an older oncely never calls it.
CREATE FUNCTION {{schema}}.oncely_fence_lost(held_rows bigint) RETURNS boolean
  LANGUAGE plpgsql
  AS $$
BEGIN
  RAISE EXCEPTION 'oncely: the claim was lost before its completion: % rows hold the fence; the transaction rolls back', held_rows
    USING ERRCODE = 'ON001';
END
$$;
