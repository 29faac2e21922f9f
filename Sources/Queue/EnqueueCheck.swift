import APNs

/// The checks a job passes before Herald's own tools add it (`herald enqueue`, `herald api`):
/// the worker's decoder, so a job the tools accept is one the worker will try to send.
public enum EnqueueCheck {
    /// Fields a producer may set; the rest of `JobField` is Herald's own bookkeeping.
    public static let producerFields: [String] = [
        JobField.token, JobField.tokens, JobField.payload, JobField.topic, JobField.pushType, JobField.priority,
        JobField.expiration, JobField.collapseID, JobField.id, JobField.app, JobField.channelID, JobLane.field, JobField.deliverAt,
    ]

    /// Every reason the worker would dead-letter (a part of) this job; empty when it would send
    /// all of it. A missing topic is not a problem: the worker fills it in from its bundle id.
    /// The first reason is the whole job's (nothing would be sent), or else one per token that
    /// is not a device token.
    public static func problems(_ fields: [(name: String, value: [UInt8])]) -> [JobError] {
        let hasTopic = fields.contains { $0.name == JobField.topic && !$0.value.isEmpty }
        let defaults = JobDefaults(bundleID: hasTopic ? nil : "com.example.validation")
        switch JobDecoder.decode(entryID: StreamEntryID(milliseconds: 1, sequence: 0), fields: fields, defaults: defaults) {
        case .failure(let error):
            return [error]
        case .success(let job):
            return job.invalidTokens.map { .notification($0.error) }
        }
    }
}
