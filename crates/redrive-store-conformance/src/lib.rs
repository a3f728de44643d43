//! The behaviour suite every redrive `Store` backend passes.
//!
//! A backend's `tests/conformance.rs` provides an async factory that returns a fresh,
//! isolated [`TestStore`] and invokes [`store_conformance_tests!`] with it; the macro
//! expands one `#[tokio::test]` per case, named after the case, so that every case is a
//! separately named, filterable, parallel test of that backend:
//!
//! ```text
//! async fn fresh() -> redrive_store_conformance::TestStore { /* new store in a tempdir */ }
//! redrive_store_conformance::store_conformance_tests!(fresh);
//! ```
//!
//! Cases are plain `pub async fn case(t: &TestStore)` functions in [`cases`], grouped by
//! area. Time moves only through the `now` values the cases pass; nothing sleeps. Cases
//! assert on error variants, never on message text. A case that needs a capability the
//! backend declares it lacks (see `Store::capabilities`) logs why and passes.
//!
//! Adding a case: write the function in the right file, then add its name once to the
//! list in [`store_conformance_tests!`]; every backend runs it from then on.

// This crate is test code: a failed unwrap is a failed case, with its location.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use redrive_store::Store;

pub mod cases;
mod support;

pub use support::{T0, at, msg, name, params, policy, secs, seqs, session_msg};

/// Reopens the same storage (for durability cases): what a restarted process would see.
pub type Reopen = Box<dyn Fn() -> Arc<dyn Store> + Send + Sync>;

/// One fresh, isolated store for one case.
pub struct TestStore {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Reopens the same storage as a new store, as after a restart; `None` if the backend
    /// cannot (the durability cases are then skipped, with a logged reason). The store in
    /// `store` may be closed by it.
    pub reopen: Option<Reopen>,
}

/// Expands one `#[tokio::test]` per conformance case. `$factory` is an async fn (path)
/// returning a fresh [`TestStore`]. The invoking crate needs `tokio` (with `macros` and
/// `rt-multi-thread`) as a dev-dependency.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:path) => {
        $crate::__conformance_cases! { $factory;
            // queues
            create_queue_starts_at_version_one_and_is_listed,
            create_existing_queue_is_queue_exists,
            unknown_queue_is_queue_not_found,
            update_with_stale_expected_version_is_version_conflict,
            policy_update_bumps_version_and_dead_letters_record_it,
            delete_non_empty_queue_needs_force,
            delete_empty_queue_without_force,
            counts_add_up,
            policy_versions_are_kept_newest_first_and_go_with_the_queue,
            // the overview
            overview_counts_agree_with_each_queue_s_counts_and_tally_open_cases,
            overview_counts_flag_candidates_that_failed_often_enough,
            ping_answers_and_names_its_backend,
            purge_removes_every_message_in_flight_too_and_keeps_dead_letters,
            purge_releases_the_queue_s_session_locks,
            // leases
            lease_is_held_by_one_holder_until_it_runs_out,
            // enqueue
            enqueue_assigns_increasing_sequences_from_one,
            enqueued_message_round_trips_every_field,
            batch_enqueue_is_atomic,
            a_non_finite_property_is_refused_and_the_batch_stores_nothing,
            session_id_on_plain_queue_is_an_attribute,
            scheduled_message_invisible_until_time,
            cancel_scheduled_removes_it,
            cancel_scheduled_refuses_messages_that_are_not_scheduled,
            peek_browses_without_locking_or_counting,
            // receive
            receive_hides_message_until_lock_expires,
            receive_returns_oldest_first_up_to_max,
            receive_counts_deliveries_and_records_delivery_times,
            lock_expiry_counts_as_abandon,
            a_lock_that_ran_out_is_shown_released_before_any_sweep,
            receive_on_session_queue_without_session_is_session_required,
            receive_with_session_on_plain_queue_is_session_not_allowed,
            next_wake_reports_schedule_and_lock_expiry,
            lowered_max_delivery_count_dead_letters_on_receive,
            // settle
            complete_removes_message,
            settle_with_stale_lock_token_is_lock_lost,
            settle_items_fail_independently,
            abandon_makes_message_visible_again,
            abandon_with_delay_and_backoff,
            abandon_at_max_delivery_count_dead_letters_with_evidence,
            application_dead_letter_keeps_reason_and_description,
            defer_then_receive_by_sequence,
            receive_deferred_of_unknown_or_not_deferred_is_message_not_found,
            renew_extends_lock,
            renew_past_its_cap_from_the_receive_is_refused,
            abandon_keeps_the_evidence_of_the_last_failed_attempt,
            // sessions
            session_messages_come_in_order_and_one_receiver_holds_session,
            next_session_message_not_delivered_while_earlier_locked,
            deferred_session_message_is_skipped,
            accept_unnamed_session_picks_oldest_free_session,
            session_lock_expires_and_can_be_taken_over,
            receive_with_lost_session_lock_is_session_lock_lost,
            renew_and_release_session,
            accept_session_on_plain_queue_is_session_not_allowed,
            list_sessions_pages_by_id_with_counts_and_live_locks,
            // group ordering
            group_ordering_delivers_each_group_in_order_one_in_flight,
            group_ordering_lets_other_groups_pass_a_blocked_one,
            group_ordering_after_abandon_redelivers_the_same_head_first,
            group_ordering_concurrent_receivers_never_share_a_group,
            // dead letters
            dead_letter_to_another_queue_forwards_copy_and_keeps_evidence,
            a_forwarded_copy_carries_its_origin_unless_it_has_one,
            application_dead_letter_to_missing_queue_is_refused_and_changes_nothing,
            broker_dead_letter_to_missing_queue_falls_back_to_own_store,
            resubmit_creates_new_sequence_and_archives_record,
            dlq_peek_lock_receive_and_complete,
            dead_letter_list_filters_and_pages,
            move_dead_letter_between_areas,
            unknown_dead_letter_is_not_found,
            // expiry
            expired_message_is_never_delivered,
            ttl_expiry_dead_letters_with_real_count_when_enabled,
            ttl_expiry_without_dlq_is_removed_and_reported,
            expired_deferred_message_is_expired_not_delivered,
            abandon_after_ttl_removes_message,
            // dedup
            duplicate_id_within_window_is_not_enqueued_again,
            duplicate_after_window_is_enqueued,
            duplicate_inside_one_batch_counts_once,
            without_window_same_id_is_enqueued_twice,
            // sweep
            sweep_releases_expired_locks_across_queues,
            sweep_respects_limit_and_reports_more,
            sweep_dead_letters_at_max_count_on_lock_expiry,
            sweep_forgets_expired_duplicate_entries,
            // concurrency
            two_receivers_never_get_same_message,
            concurrent_enqueues_get_distinct_sequences,
            concurrent_settlements_of_one_lock_succeed_once,
            // durability
            acknowledged_enqueue_survives_reopen,
            locks_and_dead_letters_survive_reopen,
            // topics
            topic_crud_round_trips,
            subscription_crud_with_its_queue,
            all_subscriptions_are_listed_by_topic_and_name,
            pause_flag_and_filter_round_trip,
            publish_fans_out_atomically,
            duplicate_event_inside_window_is_not_fanned_out_again,
            without_topic_window_duplicates_fan_out,
            delete_topic_and_subscription_need_force,
            // transactions
            a_transaction_whose_last_operation_lost_its_lock_applies_nothing,
            a_good_transaction_applies_every_operation,
            each_operation_of_a_transaction_sees_the_ones_before_it,
            a_refused_operation_is_named_with_its_single_counterpart_s_error,
            a_completion_and_its_follow_up_are_seen_together,
            // access: tokens and the audit log
            tokens_are_created_listed_and_found,
            revoking_a_token_keeps_its_first_revocation_time,
            a_token_name_is_unique_among_tokens_not_revoked,
            a_token_id_secret_or_sqs_key_is_never_reused,
            token_expiry_round_trips,
            audit_entries_are_numbered_and_chained,
            audit_list_filters_pages_and_caps,
            audit_retention_removes_old_entries_and_records_the_pass,
            audit_retention_keeps_a_single_newest_entry,
            audit_retention_removes_only_a_prefix_of_the_log,
            audit_head_follows_every_append_and_retention_pass,
            // the idempotency register
            register_put_replaces_and_answers_the_previous_entry,
            register_delete_answers_what_it_removed,
            register_list_pages_in_key_order,
            // automatic replay
            a_dead_letter_on_a_replaying_queue_is_a_candidate_due_after_the_judge_delay,
            a_dead_letter_on_a_queue_without_replay_is_not_a_candidate,
            a_dead_letter_forwarded_to_a_dead_letter_queue_is_not_a_candidate,
            subscriptions_mirror_replay_and_retention_onto_their_queue,
            claim_takes_due_live_unlocked_candidates_earliest_first_and_moves_them_on,
            quarantine_whole_moves_a_live_record_once_and_writes_its_id_back,
            a_quarantined_record_is_never_claimed,
            a_claim_stops_at_its_byte_budget,
            an_operator_move_counts_under_no_judgement_cause,
            quarantine_copy_is_create_if_absent_and_copies_the_evidence,
            finish_replay_archives_or_deletes_only_a_live_record,
            fail_replay_counts_failures_and_makes_the_record_due_at_the_retry_time,
            drain_makes_old_unlocked_live_records_candidates_up_to_the_limit,
            retention_deletes_every_area_before_the_cutoff_up_to_the_limit,
            replay_counts_group_by_area_and_cause,
            import_stores_live_records_that_are_candidates_where_replay_is_on,
            moving_into_live_is_a_restore_and_moving_out_ends_the_candidate,
            // recovery cases
            a_dead_letter_without_auto_replay_opens_a_case_with_the_record_identity,
            a_dead_letter_on_a_replaying_queue_opens_its_case_only_when_quarantined,
            a_forwarded_dead_letter_opens_a_case_and_a_fallback_is_incomplete_evidence,
            update_case_is_conditional_on_the_version_read_and_writes_everything_at_once,
            update_cases_writes_a_batch_each_with_its_audit_and_refuses_each_alone,
            case_reads_give_each_case_with_its_record_and_intent_in_order,
            list_cases_filters_and_pages_and_counts_group_them,
            the_latest_dead_letter_of_a_queue_and_reason_is_its_newest_case,
            due_cases_are_those_whose_check_time_came_earliest_first,
            drop_case_payloads_deletes_the_record_and_kept_bytes_and_keeps_the_case,
            the_first_word_on_an_intent_stands,
            effect_authorities_are_put_replaced_listed_and_deleted,
            case_groups_are_created_once_updated_on_their_version_and_listed,
            moving_a_record_into_quarantine_opens_its_case_once,
            import_opens_cases_where_no_replay_settles_the_records,
            the_opening_rule_agrees_with_the_cases_the_store_opened,
            cases_survive_reopen,
            // message move tasks
            one_move_task_is_active_per_source_and_tasks_round_trip,
            a_move_task_cancel_is_asked_of_a_running_task_only,
            move_task_progress_is_written_by_its_runner_only,
            an_orphaned_move_task_is_claimed_once_its_heartbeat_passed,
            only_the_most_recent_finished_move_tasks_of_a_source_are_kept,
            a_move_task_is_listed_as_an_sqs_move_plan_with_its_budget_and_progress,
            a_second_active_move_task_is_refused_while_cases_plans_of_the_queue_are_not_affected,
            // bounded replay plans
            replay_plans_are_stored_with_their_items_read_listed_and_paged,
            replay_plan_items_filter_by_state_and_page_by_seq,
            update_replay_plan_is_conditional_on_the_version_read_and_writes_all_or_nothing,
            an_admitted_case_is_held_by_one_plan_item_at_a_time,
            concurrent_updates_of_one_plan_version_succeed_once,
            concurrent_admissions_of_one_case_by_many_plans_succeed_once,
            // failures by signature
            failures_group_dead_letters_by_signature_per_area,
            failure_sparkline_keeps_the_last_day_of_hours,
            dead_letter_list_filters_narrow_in_the_store,
        }
    };
}

/// Implementation detail of [`store_conformance_tests!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($factory:path; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let t: $crate::TestStore = $factory().await;
                $crate::cases::$case(&t).await;
            }
        )*
    };
}
