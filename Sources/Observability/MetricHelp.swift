/// The `# HELP` text of every counter and gauge Herald exports, by metric name.
///
/// Kept in one table because the Prometheus registry insists that every series of a name carries
/// the same help text (it stops the process otherwise): whoever makes a series, through
/// `HeraldMetrics` or swift-metrics' global API, gets the text from here. The histograms state
/// theirs where they are declared (`SharedHistograms.declare`). docs/operations.md has the same
/// list as a table for people; a test compares it with a live worker's /metrics.
public enum MetricHelp {
    public static let text: [String: String] = [
        "herald_build_info": "Always 1; the labels say which Herald version, git commit and Swift compiler the worker runs.",
        "herald_notifications_total":
            "Notifications this worker finished, by the app that sent them and their outcome. Every notification read ends in one outcome; retried and handed_back end only this worker's part (the notification comes back through the retry set and is counted again), and so does scheduled (held for a deliver_at still ahead, counted again when due). app is empty for jobs that name no app this worker serves.",
        "herald_apns_responses_total":
            "APNs answers by app, HTTP status and reason (empty for 200), one per attempt: a notification retried after a 503 is answered again, so this is not herald_notifications_total, which counts each notification's outcome once.",
        "herald_jobs_read_total": "Stream entries read (XREADGROUP and claims), malformed ones included. A fan-out job is one entry and several notifications.",
        "herald_jobs_reclaimed_total": "Stream entries taken over from other consumers with XAUTOCLAIM (a worker died or stalled holding them).",
        "herald_jobs_dead_lettered_total":
            "Dead-lettered notifications by reason: the breakdown of herald_notifications_total{outcome=\"dead_lettered\"}, counted per notification like it (a fan-out job's tokens each count), reasons APNs does not document counted as Unknown.",
        "herald_jobs_unknown_fields_total": "Job fields Herald does not know and ignored (a typo in a producer shows here).",
        "herald_redis_errors_total": "Redis errors: lost or refused connections and error replies. The worker reconnects with backoff.",
        "herald_consumers_removed_total":
            "Consumers of the group removed by this worker: idle for --idle-consumer-timeout and owning no pending entry (workers scaled down or replaced).",
        "herald_token_backoff_deferred_total":
            "Notifications not sent because APNs had answered 429 TooManyRequests for their device token and its backoff had not passed: parked in the retry set until it passes, no attempt spent (also counted as handed_back).",
        "herald_wrong_environment_total":
            "Notifications of an app with both APNs environments that production called a bad device token and sandbox accepted: delivered, with a wrong_environment feedback entry (the backend's record of the token names the wrong environment).",
        "herald_token_backoffs": "Device tokens backing off after 429 TooManyRequests right now (each worker loop remembers at most --token-backoff-capacity).",
        "herald_streams_in_flight": "Notifications on an HTTP/2 stream to APNs, waiting for the answer.",
        "herald_notifications_queued": "Notifications read for the app and waiting for a free stream slot (not yet sent).",
        "herald_stream_slots_free": "Streams the app's connections could open now (APNs' limit per connection, at most --max-streams).",
        "herald_connections": "The app's APNs connections by state.",
        "herald_connection_events_total": "APNs connection events: opened, failed to open, closed by GOAWAY, reset, and timeouts.",
        "herald_jwt_mints_total": "Provider tokens (JWT) signed for the app.",
        "herald_credentials_rejected": "1 while APNs refuses the app's credentials and the worker has stopped sending for it, else 0.",
        "herald_last_success_timestamp_seconds": "When APNs last accepted a notification of the app (UNIX seconds); absent until the first success.",
        "herald_queue_depth": "Entries in the jobs stream: not yet read, read and not yet acknowledged, and finished entries not yet trimmed (about every 100 ms). Sampled every 5 s by every worker: aggregate with max.",
        "herald_queue_pending": "Entries delivered to a consumer of the group and not yet acknowledged: held under a lease or in the group's pending list. Sampled: aggregate with max.",
        "herald_consumer_lag": "Entries of the jobs stream not yet delivered to any consumer of the group (depth - pending when Redis cannot count it). Sampled: aggregate with max.",
        "herald_urgent_queue_depth": "Entries in the queue's urgent stream (jobs:urgent): not yet read plus read and not yet acknowledged. Sampled every 5 s by every worker: aggregate with max.",
        "herald_urgent_queue_pending": "Entries of the urgent stream delivered to a consumer of the group and not yet acknowledged: held under a lease or in the group's pending list. Sampled: aggregate with max.",
        "herald_urgent_consumer_lag": "Entries of the urgent stream not yet delivered to any consumer of the group. Sampled: aggregate with max; above 0 for long means urgent jobs wait.",
        "herald_notifications_priority_total": "Notifications handed to APNs (every attempt) by app and effective apns-priority (the job's, else its push type's default). APNs throttles an app's priority-10 sends; watch priority=\"10\" per app.",
        "herald_retry_set_size": "Notifications waiting in the retry set for their next attempt. Sampled: aggregate with max.",
        "herald_dead_letter_stream_length": "Entries in the dead-letter stream. Sampled: aggregate with max.",
        "herald_feedback_stream_length": "Entries in the feedback (dead token) stream. Sampled: aggregate with max.",
        "herald_metrics_http_accept_calls_total": "accept(2) calls of the metrics server, successful or not.",
        "herald_metrics_http_accept_out_of_descriptors_total": "accept(2) calls of the metrics server that found no file descriptor left (each pauses accepting).",
        "herald_metrics_http_connections_shed_total": "Metrics server connections closed to stay within 64 open.",
        "herald_metrics_http_connections_timed_out_total": "Metrics server connections closed for sending no full request within 10 s.",
        "herald_metrics_http_open_connections": "Metrics server connections open now.",
    ]
}
