//! The fault matrix (docs/FAULTS.md) against real `redis-server`
//! processes, for both front ends, and the least-privilege suite: the
//! behaviour suite's core cases run as an ACL user with exactly the rights
//! README's "Least privilege" section lists.
//!
//! Each row is written once, generic over `behaviour::front::Front`, in
//! `tests/faults/matrix.rs`, and instantiated here by `fault_matrix!` as
//! `blocking::matrix::<row>` and `aio::matrix::<row>`; the hand-over's
//! failure cases (`tests/faults/handover.rs`, docs/PROTOCOL.md §11) become
//! `blocking::handover::<row>` and `aio::handover::<row>`; the election's
//! (`tests/faults/election.rs`) `blocking::election::<row>` and
//! `aio::election::<row>`; the multi-key leases' (`tests/faults/multi.rs`, docs/PROTOCOL.md §11)
//! become `blocking::multi::<row>` and `aio::multi::<row>`; the
//! least-privilege cases become `blocking::least_privilege::<case>` and
//! `aio::least_privilege::<case>`.
//!
//! Two ignored tests are helpers that the rows start as child processes (a
//! holder or a waiter that is stopped or killed, an election's candidates,
//! and the workers of the fencing torture run); without their environment variables they return
//! at once. The long torture run itself is `fencing_torture_long_run`
//! (ignored; see `examples/fencing_torture.rs`).
#![allow(clippy::disallowed_methods)]

#[allow(dead_code, unused_imports, unused_macros)]
mod behaviour;
// `tests/support`, loaded once: by the torture run below, which includes it.
use fencing_torture::support;

#[path = "faults/candidates.rs"]
mod candidates;
#[path = "faults/child.rs"]
mod child;
#[path = "faults/election.rs"]
mod election_faults;
#[path = "faults/handover.rs"]
mod handover;
#[path = "faults/least_privilege.rs"]
mod least_privilege;
#[path = "faults/matrix.rs"]
mod matrix;
#[path = "faults/multi.rs"]
mod multi;

#[allow(dead_code)]
#[path = "../examples/fencing_torture.rs"]
mod fencing_torture;

/// One `#[test]` per fault-matrix row and per least-privilege case, for the
/// front end `$front`.
macro_rules! fault_matrix {
    ($front:ty) => {
        /// The front end of this instantiation.
        type Front = $front;

        mod matrix {
            fault_matrix!(@rows crate::matrix;
                restart_with_data_loss_between_two_acquires_still_increases_the_fence,
                restart_with_data_loss_while_held_lets_the_next_holder_in_with_a_higher_fence,
                sigstop_during_acquire_is_outcome_unknown_and_a_later_acquire_works,
                sigstop_during_renew_is_outcome_unknown_and_the_lease_is_never_valid_again,
                sigstop_during_release_is_outcome_unknown_and_a_later_acquire_works,
                client_kill_of_the_command_connection_mid_wait_strands_no_waiter,
                client_kill_of_the_subscriber_mid_wait_resubscribes_and_notifications_still_wake_waiters,
                client_kill_of_the_subscriber_racing_a_release_strands_no_waiter,
                script_flush_mid_wait_reloads_the_scripts_and_waiters_still_acquire,
                maxmemory_policy_allkeys_lru_logs_redis_eviction_unsafe_and_still_works,
                maxmemory_policy_is_checked_through_info_when_config_get_is_refused,
                acl_user_without_the_handover_keys_waits_without_them,
                acl_user_without_pubsub_rights_falls_back_to_polling_and_stays_correct,
                holder_process_killed_without_releasing_frees_the_key_when_its_lease_expires,
                restart_while_permit_waiters_wait_lets_them_acquire_after_it,
                sigstop_during_a_permit_acquire_is_outcome_unknown_and_its_token_is_released_later,
                client_kill_of_the_command_connections_mid_wait_permit_waiters_still_acquire,
                client_kill_of_the_subscriber_mid_wait_permit_waiters_are_still_notified,
                acl_user_without_pubsub_rights_permit_waiters_poll_and_still_acquire,
                restart_while_a_reader_and_a_writer_wait_lets_them_acquire_after_it,
                sigstop_during_a_write_acquire_is_outcome_unknown_and_its_token_is_released_later,
                sigstop_during_a_read_acquire_is_outcome_unknown_and_its_token_is_released_later,
                client_kill_of_the_command_connections_mid_wait_readers_and_writers_still_acquire,
                client_kill_of_the_subscriber_mid_wait_readers_and_writers_are_still_notified,
                acl_user_without_pubsub_rights_readers_and_writers_poll_and_still_acquire,
                sentinel_failover_while_contenders_wait_costs_only_time,
                permit_and_writer_processes_killed_without_releasing_free_their_keys_at_the_ttl,
            );
        }

        mod handover {
            fault_matrix!(@rows crate::handover;
                a_release_replayed_after_it_handed_the_lock_over_grants_nothing_twice,
                a_claim_of_unknown_outcome_is_sent_again_and_answers_the_same_fence,
                a_head_stopped_after_it_registered_costs_the_claim_window_not_the_lease,
                a_killed_waiters_registration_stops_blocking_others_within_its_bound,
                a_lingering_locker_whose_subscriber_was_killed_hands_the_key_on_at_its_release,
            );
        }

        mod election {
            fault_matrix!(@rows crate::election_faults;
                a_sigstopped_leader_is_replaced_and_after_sigcont_its_old_terms_write_is_refused,
                one_leader_at_a_time_under_faults_checked_on_a_second_redis,
                one_leader_at_a_time_across_three_processes_checked_on_a_second_redis,
            );
        }

        mod multi {
            fault_matrix!(@rows crate::multi;
                a_multi_key_loop_killed_at_random_points_never_leaves_a_partial_hold,
                restart_with_data_loss_mid_loop_keeps_fences_increasing_and_holds_whole,
                a_multi_key_acquire_of_unknown_outcome_is_sent_again_and_answers_the_same_fences,
                multi_key_renews_and_releases_of_unknown_outcome_are_harmless_sent_again,
                a_try_once_multi_key_acquire_of_unknown_outcome_is_released_whole_later,
            );
        }

        mod least_privilege {
            fault_matrix!(@rows crate::least_privilege;
                fences_strictly_increase,
                fences_keep_increasing_after_redis_lost_its_data,
                a_replayed_acquire_returns_the_same_fence,
                a_zero_wait_on_a_held_key_is_busy,
                a_waiter_is_woken_by_the_release_notification,
                a_release_by_the_same_locker_wakes_its_waiters,
                waiters_are_served_in_arrival_order,
                a_wait_that_runs_out_is_wait_timeout,
                release_outcomes_released_expired_conflict,
                renew_outcomes_renewed_expired_conflict,
                flushed_scripts_are_loaded_again,
                shutdown_releases_tracked_leases,
                shutdown_ends_waits,
                permits_are_granted_up_to_the_count,
                each_slots_fences_strictly_increase,
                a_permit_release_wakes_a_waiter,
                permit_outcomes_and_count_changes,
                readers_share_and_a_writer_holds_alone,
                a_waiting_writer_keeps_readers_out,
                reader_renew_and_release_outcomes,
                one_leader_at_a_time_with_increasing_terms,
                a_resign_hands_over_and_proclaim_logs,
                multi_key_leases_wait_hold_and_release,
                an_observer_reads_the_leader_as_a_read_only_user,
                no_command_outside_the_rules_is_sent,
                without_the_key_names_rule_only_a_default_locker_connects,
            );
        }
    };
    (@rows $module:path; $($row:ident),* $(,)?) => {
        $(
            #[test]
            fn $row() {
                use $module as rows;
                rows::$row::<super::Front>();
            }
        )*
    };
}

mod blocking {
    fault_matrix!(crate::behaviour::Blocking);
}

mod aio {
    fault_matrix!(crate::behaviour::Async);
}

/// README's least-privilege rules of one namespace match no other
/// namespace's keys or channels (`ACL DRYRUN`; no locker involved).
#[test]
fn least_privilege_rules_match_no_other_namespaces_names() {
    least_privilege::a_namespaces_rules_match_no_other_namespaces_names();
}

/// Child-process helper of
/// `holder_process_killed_without_releasing_frees_the_key_when_its_lease_expires`
/// and of the hand-over and election rows: acquires a key (a lock, a
/// permit or a write lease, or waits for a held lock) and holds it until
/// it is killed, or leads an election, or runs candidates of one.
#[test]
#[ignore = "a helper the fault matrix starts as a child process"]
fn holder_child_process() {
    child::run_holder_if_asked();
}

/// Child-process helper of `fencing_torture_long_run`: one worker process.
#[test]
#[ignore = "a helper the torture run starts as a child process"]
fn torture_worker_process() {
    fencing_torture::run_worker_if_asked();
}

/// The fencing torture run of `examples/fencing_torture.rs`, long:
/// `REDLEASE_TORTURE_SECONDS` (default 300) seconds of contention and
/// injected faults; fails on any fencing violation, stranded waiter or
/// token left behind.
#[test]
#[ignore = "long-running: the fencing torture run (REDLEASE_TORTURE_SECONDS, default 300)"]
fn fencing_torture_long_run() {
    let seconds = std::env::var("REDLEASE_TORTURE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let options = fencing_torture::Options {
        seconds,
        ..fencing_torture::Options::default()
    };
    let report = fencing_torture::run_controller(
        &options,
        fencing_torture::Relaunch::TestHarness {
            test: "torture_worker_process",
        },
    )
    .unwrap_or_else(|e| panic!("the torture run could not run: {e}"));
    println!("{}", report.to_json());
    assert!(report.passed(), "{}", report.to_json());
}
