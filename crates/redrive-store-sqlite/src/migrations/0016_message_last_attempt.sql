-- redrive SQLite schema: the evidence of a message's last failed push attempt.
-- A push subscription's dispatcher that abandons an event after a failed attempt (for a
-- retry, or to wait for its time to live) writes the attempt's evidence here, in the
-- same statement as the abandon: a small JSON object (the attempt's number, outcome,
-- status code, error and start), bounded by the dispatcher. The dead-letter record of an
-- event that later expires without another attempt is written from it, by whichever
-- node and after any restart. Other settlements (and an abandon without evidence) leave
-- it as it is. NULL: no failed push attempt recorded.
ALTER TABLE messages ADD COLUMN last_attempt TEXT;
