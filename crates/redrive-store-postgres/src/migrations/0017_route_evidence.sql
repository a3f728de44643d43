-- redrive PostgreSQL schema, version 17 (as SQLite version 17): route evidence that keeps its
-- route. Each dead-letter record says how the evidence shows it was separated
-- (route_kind: case::Route::as_str, broker_routed, application_quarantined or
-- route_indeterminate), under which rule (route_rule: case::RouteRule::as_str; NULL when
-- nothing names one) and, for an application's dead letter, the consumer and the version
-- of its classification rule that applied the reason (NULL when it did not say). A case
-- copies them when it opens, so that they outlive the record. policy_version 0 means that
-- no version is known (an import whose source did not say; versions start at 1).
--
-- Rows written before: route_kind from route (an import whose source gave no reason is
-- route_indeterminate), the rule as the broker read it from the route and the reason
-- (RouteRule::of), no consumer and no rule version.
ALTER TABLE dead_letters ADD COLUMN route_kind text NOT NULL DEFAULT 'broker_routed';
ALTER TABLE dead_letters ADD COLUMN route_rule text;
ALTER TABLE dead_letters ADD COLUMN consumer text;
ALTER TABLE dead_letters ADD COLUMN rule_version text;
UPDATE dead_letters SET route_kind = CASE
    WHEN route = 'application' THEN 'application_quarantined'
    WHEN route = 'import' AND reason = 'Imported' THEN 'route_indeterminate'
    ELSE 'broker_routed' END;
UPDATE dead_letters SET route_rule = CASE
    WHEN route_kind = 'route_indeterminate' THEN NULL
    WHEN route_kind = 'application_quarantined' THEN 'application'
    WHEN lower(reason) LIKE '%ttl%' OR lower(reason) LIKE '%timetolive%'
        OR lower(reason) LIKE '%expired%' THEN 'expiry'
    WHEN lower(reason) LIKE '%filter%' THEN 'filter'
    WHEN lower(reason) LIKE '%size%' OR lower(reason) LIKE '%toolarge%' THEN 'size'
    ELSE 'delivery_threshold' END;

ALTER TABLE cases ADD COLUMN route_rule text;
ALTER TABLE cases ADD COLUMN consumer text;
ALTER TABLE cases ADD COLUMN rule_version text;
UPDATE cases SET route_rule = CASE
    WHEN route = 'route_indeterminate' THEN NULL
    WHEN route = 'application_quarantined' THEN 'application'
    WHEN lower(reason) LIKE '%ttl%' OR lower(reason) LIKE '%timetolive%'
        OR lower(reason) LIKE '%expired%' THEN 'expiry'
    WHEN lower(reason) LIKE '%filter%' THEN 'filter'
    WHEN lower(reason) LIKE '%size%' OR lower(reason) LIKE '%toolarge%' THEN 'size'
    ELSE 'delivery_threshold' END;
