import ArgumentParser

@main
struct Herald: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Delivers Apple push notifications from Redis over pooled HTTP/2 connections.",
        subcommands: [WorkerCommand.self, EnqueueCommand.self, APICommand.self, DemoCommand.self, SendCommand.self, MockAPNsCommand.self, LoadGenCommand.self, StatsCommand.self, DeadLettersCommand.self, FeedbackCommand.self])
}
