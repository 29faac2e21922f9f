import Foundation
import Queue
import Testing

extension IntegrationTests {
    /// `herald enqueue --channel`: the binary writes a broadcast job, and refuses one it could
    /// not send with the sysexits status and the reason.
    @Suite
    struct CLIBroadcast {
        static let update = #"{"aps":{"timestamp":1732370000,"event":"update","content-state":{}}}"#

        @Test
        func enqueueChannelWritesABroadcastJob() async throws {
            try await withOperationsBed { bed in
                let keys = QueueKeys()
                let run = try await CLIRun(bed, ["enqueue", "--redis", bed.redis.url, "--channel", "dHN0LXNyY2gtY2hubA==",
                                                 "--payload", Self.update, "--priority", "5", "--expiration", "0",
                                                 "--bundle-id", "com.example.app"])
                #expect(run.status == 0, "\(run)")
                let job = try #require(try await bed.client.entries(keys.jobs).first)
                #expect(job["channel_id"] == "dHN0LXNyY2gtY2hubA==" && job["token"] == nil && job["tokens"] == nil, "\(job)")
                #expect(job["topic"] == "com.example.app" && job["priority"] == "5" && job["expiration"] == "0" && job["push_type"] == nil, "\(job)")

                let cases: [(arguments: [String], status: Int32, says: String)] = [
                    (["--channel", "dHN0LXNyY2gtY2hubA==", "--token", String(repeating: "ab", count: 32)], 64, "not both"),
                    (["--channel", "dHN0LXNyY2gtY2hubA==", "--push-type", "voip"], 64, "liveactivity"),
                    (["--channel", "dHN0LXNyY2gtY2hubA==", "--collapse-id", "x"], 64, "collapse"),
                    (["--channel", "not a channel"], 65, "bad_channel_id"),
                    (["--channel", "dHN0LXNyY2gtY2hubA==", "--payload", #"{"aps":{"alert":"Hi"}}"#], 65, "live_activity_missing_timestamp"),
                ]
                for item in cases {
                    var arguments = ["enqueue", "--redis", bed.redis.url] + item.arguments
                    if !item.arguments.contains("--payload") { arguments += ["--payload", Self.update] }
                    let refused = try await CLIRun(bed, arguments)
                    #expect(refused.status == item.status, "herald \(arguments.joined(separator: " ")): \(refused)")
                    #expect((refused.stderr + refused.stdout).contains(item.says), "herald \(arguments.joined(separator: " ")): \(refused)")
                }
                #expect(try await bed.length(keys.jobs) == 1, "a refused broadcast added nothing")
            }
        }
    }
}
