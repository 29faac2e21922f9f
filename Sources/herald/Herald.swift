import ArgumentParser
import HeraldBuildInfo

@main
struct Herald: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Delivers Apple push notifications from Redis over pooled HTTP/2 connections.",
        discussion: """
            Start with `herald worker --help`. Backends add jobs to a Redis stream (docs/job-format.md), \
            directly or through `herald api`; `herald worker` delivers them. Every worker flag also \
            reads a HERALD_* environment variable (flags win). Exit statuses: 0 success, 1 other \
            failures, 64 usage, 65 bad job data, 69 Redis or APNs unavailable, 78 configuration \
            (docs/operations.md).
            """,
        version: HeraldVersion.description,
        subcommands: [WorkerCommand.self, EnqueueCommand.self, APICommand.self, SendCommand.self, ChannelsCommand.self, StatsCommand.self,
                      DeadLettersCommand.self, FeedbackCommand.self, ResultsCommand.self, MockAPNsCommand.self, LoadGenCommand.self, DemoCommand.self])
}
