//! The real-Redis behaviour suite, written once for any front end.
//!
//! Every body is a generic `fn name<F: Front>()` that starts its own
//! `redis-server` (see `tests/support`) and uses its own namespace. A test
//! binary runs the whole suite for one front end with
//! `behaviour::behaviour_suite!(behaviour::Blocking);`, which expands to
//! one `#[test]` per body, named after it, grouped by topic.
//!
//! Waits are bounded (`BOUND`, `join_within`, `wait_until`) and no body
//! asserts how long something took; where a hand-over must have come
//! through a notification, safety polls are set to 30 s and the wait is
//! bounded at 10 s.

pub(crate) mod common;
pub(crate) mod election;
pub(crate) mod faults;
pub(crate) mod fences;
pub(crate) mod front;
pub(crate) mod handover;
pub(crate) mod input;
pub(crate) mod invariants;
pub(crate) mod key_names;
pub(crate) mod logs;
pub(crate) mod multi;
pub(crate) mod outcomes;
pub(crate) mod rw_lock;
pub(crate) mod secrets;
pub(crate) mod semaphore;
pub(crate) mod server;
pub(crate) mod shutdown;
pub(crate) mod survival;
pub(crate) mod waiting;

/// The blocking front end under its suite name.
#[allow(
    dead_code,
    reason = "each test binary instantiates the suite for one front end"
)]
pub(crate) type Blocking = redlease::blocking::Locker;

/// The async front end under its suite name.
#[allow(
    dead_code,
    reason = "each test binary instantiates the suite for one front end"
)]
pub(crate) type Async = front::Async;

/// Expands to one `#[test]` per behaviour body for the front end `$front`
/// (a type implementing `front::Front`), in one module per topic.
macro_rules! behaviour_suite {
    ($front:ty) => {
        $crate::behaviour::behaviour_suite!(@topics $front;
            fences {
                fences_strictly_increase_across_acquires_on_one_key,
                fences_keep_increasing_after_redis_lost_its_data,
                an_acquire_replayed_with_its_token_returns_the_same_fence,
                an_uncontended_cycle_runs_nine_commands_and_a_busy_attempt_three,
                the_acquire_script_moves_any_counter_exactly,
                a_counter_of_another_type_is_refused_and_left_alone,
            }
            invariants {
                a_read_whose_reply_was_lost_counts_its_lease_from_the_first_send,
                a_reader_without_the_handover_never_has_a_writer_granted_beside_it,
                a_locker_queued_again_for_its_next_waiter_keeps_the_queue_flagged,
                killed_registrants_let_no_attempt_jump_a_waiting_locker,
                only_the_keys_kept_on_purpose_outlive_the_leases_and_registrations,
            }
            multi {
                all_keys_are_taken_at_once_each_with_its_own_fence,
                a_held_key_makes_it_wait_reserving_the_free_ones,
                overlapping_sets_in_opposite_orders_never_deadlock,
                a_multi_key_waiter_is_not_starved_by_single_key_contenders,
                multi_key_input_is_checked_before_anything_is_sent,
                a_renew_that_finds_a_key_gone_gives_up_every_key,
                a_waiter_that_gives_up_leaves_no_reservation,
                shutdown_releases_a_waiting_multi_key_leases_reservations,
                a_released_multi_key_lease_leaves_no_reservation_for_itself,
                a_multi_key_waiter_takes_its_turn_in_a_held_keys_queue,
                multi_key_scripts_run_again_with_one_token_answer_as_the_first_run,
                the_acquire_script_never_leaves_a_partial_hold_it_finds,
                an_uncontended_multi_key_cycle_sets_counters_at_once_and_publishes_what_is_heard,
                the_multi_key_release_publishes_each_keys_digest_on_its_channel,
                the_multi_key_grant_moves_each_counter_by_the_fence_rule,
            }
            waiting {
                a_waiter_is_woken_by_the_release_notification_not_its_safety_poll,
                a_release_by_the_same_locker_wakes_its_waiters_through_the_notification,
                waiters_queued_behind_their_own_lockers_grant_are_woken_by_the_notification,
                sixteen_waiters_of_one_locker_send_no_more_attempts_than_one_poller,
                waiters_of_one_locker_are_served_in_arrival_order,
                a_zero_wait_on_a_held_key_gives_lock_busy_with_the_holders_remaining_time,
                a_zero_wait_acquire_never_jumps_its_lockers_line,
                acquires_beyond_max_waiters_fail_with_queue_full,
                a_wait_that_runs_out_gives_wait_timeout_with_the_holders_remaining_time,
            }
            outcomes {
                release_of_a_held_lease_reports_released_and_keeps_the_fence_counter,
                release_after_the_lease_expired_reports_expired,
                release_after_another_owner_took_the_key_reports_conflict,
                renew_of_a_held_lease_extends_it_to_a_full_lease,
                renew_after_the_lease_expired_reports_expired_and_the_lease_stays_invalid,
                renew_after_another_owner_took_the_key_reports_conflict_and_stays_invalid,
                release_after_a_renew_saw_the_lease_expired_reports_expired,
                release_after_a_renew_saw_a_conflict_reports_conflict,
            }
            faults {
                flushed_scripts_are_loaded_again,
                killed_command_connections_strand_no_waiter,
                waiters_are_still_notified_after_the_subscriber_connection_is_killed,
                a_command_connection_killed_while_idle_does_not_fail_the_next_operation,
                a_locker_keeps_working_after_the_server_restarts,
                an_acquire_on_a_paused_server_is_outcome_unknown_and_its_token_is_released_later,
                an_acquire_rejected_by_redis_is_provider_failed,
                connecting_to_a_closed_port_is_provider_failed,
            }
            server {
                connecting_to_a_server_that_may_evict_keys_logs_redis_eviction_unsafe,
                waiters_poll_when_the_acl_refuses_release_notifications,
                a_release_whose_notification_the_acl_refuses_still_reports_released,
            }
            shutdown {
                shutdown_releases_tracked_leases_and_keeps_fence_counters,
                shutdown_ends_waits_and_refuses_new_acquires_with_shutting_down,
                releasing_a_lease_after_shutdown_reports_shutting_down,
                shutdown_against_a_paused_server_reports_cleanup_timeout,
            }
            survival {
                waiters_survive_a_short_outage_and_acquire_after_the_restart,
                shutdown_after_the_command_connection_was_killed_releases_the_locks,
                a_dropped_lease_frees_a_waiter_of_the_same_locker_before_its_ttl,
                the_subscription_closes_a_second_after_contention_ends_without_further_calls,
                waiters_are_still_notified_after_the_subscriber_connection_is_killed_twice,
                a_tiny_positive_wait_always_asks_redis_at_least_once,
                one_refused_release_at_shutdown_does_not_hide_the_releases_that_worked,
            }
            input {
                bad_keys_are_refused_with_invalid_key,
                bad_configs_and_options_are_refused_with_invalid_config,
                namespaces_with_glob_characters_are_refused,
                malformed_urls_are_refused_with_invalid_config,
            }
            secrets {
                leases_errors_and_logs_never_show_tokens_keys_or_addresses,
            }
            key_names {
                a_locker_whose_key_hash_tags_differ_from_the_namespaces_is_refused,
                of_two_lockers_racing_to_record_different_settings_one_is_refused,
                a_lost_marker_is_recorded_again_and_an_unknown_one_refuses,
            }
            rw_lock {
                readers_share_a_writer_holds_alone_and_epochs_follow_fences,
                writer_fences_strictly_increase_also_after_data_loss,
                a_waiting_writer_keeps_new_readers_out_and_gets_in_on_release,
                a_dead_writers_intent_blocks_readers_only_briefly,
                a_dead_reader_frees_the_writer_at_its_ttl,
                a_reader_renew_never_resurrects_an_expired_reader,
                replayed_reads_and_writes_return_the_same_epoch_and_fence,
                a_stream_of_readers_does_not_starve_a_waiting_writer,
                readers_overlap_and_a_writer_never_overlaps_anyone_under_contention,
                writer_renew_and_release_report_their_outcomes,
                read_and_write_steps_run_the_commands_counted_here,
                the_readers_set_expires_with_its_latest_member_and_replays_keep_their_grant,
                the_write_counter_moves_exactly_and_keeps_or_takes_its_expiry,
            }
            handover {
                grants_follow_the_order_in_which_lockers_registered,
                a_lapsed_registration_is_skipped,
                a_hand_over_runs_seven_commands_and_the_grant_is_extended_later,
                claims_keep_a_served_lockers_registration_alive,
                an_unclaimed_grant_goes_to_the_next_registration,
                a_free_lock_with_a_queue_goes_to_the_head_not_to_a_newcomer,
                nobody_is_queued_when_nobody_waits,
                with_the_handover_off_nothing_is_queued,
                freed_permits_go_to_lockers_in_registration_order,
                a_free_permit_with_a_queue_goes_to_the_head_not_to_a_newcomer,
                a_permits_grant_is_taken_without_a_claim_and_the_next_waiter_registers_anew,
                a_replayed_slot_release_or_extension_grants_nothing_twice,
                a_locker_whose_last_waiter_gave_up_leaves_the_queue,
                shutdown_removes_the_lockers_registrations,
                a_grant_to_a_locker_whose_last_waiter_gave_up_is_passed_on_at_once,
                a_released_write_lets_queued_readers_in_together_and_writers_keep_their_turn,
                a_replayed_release_or_extension_grants_nothing_twice,
                lockers_with_and_without_the_handover_share_a_key_safely,
                lone_waiters_keep_their_registrations_and_wait_without_busy_attempts,
                a_grant_to_a_lingering_registration_nobody_came_back_for_is_passed_on,
                a_head_without_a_registration_registers_at_the_first_grant_elsewhere,
                a_grant_beside_a_hold_gone_from_redis_goes_to_the_next_waiter,
            }
            election {
                one_leader_at_a_time_under_contention_and_terms_strictly_increase,
                a_non_candidate_sees_the_leader_and_its_value,
                proclaim_changes_the_value_and_keeps_the_term,
                a_resign_hands_over_to_a_waiting_candidate,
                a_dropped_or_killed_leader_is_replaced,
                a_too_large_value_is_refused_and_nothing_is_written,
                debug_never_shows_the_value,
                a_leadership_is_renewed_by_its_keeper,
                kept_keeper_threads_renew_the_leaderships_that_follow,
                a_leadership_taken_away_fires_lost_and_proclaim_refuses,
                observe_sees_every_change_in_order_and_resyncs_after_data_loss,
                an_observer_is_woken_by_notifications_and_after_a_resubscription,
                observers_of_one_name_share_one_read_per_change,
                replayed_campaigns_and_proclaims_log_nothing_twice,
                shutdown_resigns_a_leadership,
                a_deposed_leaders_write_with_its_old_term_is_refused_by_a_fenced_store,
            }
            semaphore {
                permits_are_granted_up_to_the_count_each_in_a_slot_of_its_own,
                each_slots_fences_strictly_increase_also_after_data_loss,
                a_release_wakes_a_waiter_through_the_notification,
                waiters_of_one_locker_take_every_free_permit_at_once,
                another_permit_count_is_refused_while_held_and_applies_once_drained,
                permit_renew_and_release_report_their_outcomes,
                a_dead_holders_slot_frees_at_its_ttl,
                a_replayed_permit_acquire_returns_the_same_slot_and_fence,
                bad_permit_counts_and_keys_are_refused,
                never_more_than_n_hold_permits_under_contention_and_each_slots_fences_increase,
                a_dropped_permit_frees_a_waiter_of_the_same_locker_before_its_ttl,
                a_permit_cycle_runs_ten_commands_and_a_busy_attempt_one_mget_and_a_pttl_per_slot,
                slots_past_the_count_asked_for_are_still_seen,
                a_slots_counter_moves_exactly_and_keeps_or_takes_its_expiry,
            }
        );
    };
    (@topics $front:ty; $($topic:ident { $($(#[$attr:meta])* $body:ident),* $(,)? })*) => {
        /// The front end this binary runs the behaviour suite against.
        type BehaviourFront = $front;
        $(
            mod $topic {
                $(
                    #[test]
                    $(#[$attr])*
                    fn $body() {
                        $crate::behaviour::$topic::$body::<super::BehaviourFront>();
                    }
                )*
            }
        )*
    };
}
pub(crate) use behaviour_suite;
