@testable import Observability
import Testing

/// The /proc parsing behind the `process_*` metrics, on lines as the kernel writes them,
/// including a command name made to confuse a parser.
@Suite
struct ProcessMetricsParsing {
    @Test
    func statFieldsAreCountedFromTheLastParenthesis() throws {
        // The command name (field 2) may hold spaces and parentheses: `herald) 1 2 (x`.
        let line = "4242 (herald) 1 2 (x) S 1 4242 4242 0 -1 4194560 1200 0 0 0 150 75 0 0 20 0 5 0 123456 162353152 8333 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
        let stat = try #require(ProcessStat(line))
        #expect(stat.userTicks == 150 && stat.systemTicks == 75)
        #expect(stat.startTimeTicks == 123456)
        #expect(stat.virtualBytes == 162353152 && stat.residentPages == 8333)
    }

    @Test
    func truncatedOrForeignTextIsNoReading() {
        #expect(ProcessStat("4242 (herald) S 1 4242") == nil)
        #expect(ProcessStat("no parenthesis here 1 2 3") == nil)
        #expect(ProcessStat("") == nil)
        #expect(ProcessMetrics.bootTime("cpu  1 2 3\nbtime 1795400000\nprocesses 9\n") == 1795400000)
        #expect(ProcessMetrics.bootTime("cpu  1 2 3\n") == nil)
    }

    @Test
    func thisProcessReadsPlausibly() throws {
        let metrics = ProcessMetrics()
        let reading = metrics.read()
        let resident = try #require(reading.residentBytes)
        let virtual = try #require(reading.virtualBytes)
        let open = try #require(reading.openFDs)
        let limit = try #require(reading.maxFDs)
        #expect(resident > 1_048_576 && virtual >= resident)
        #expect(open >= 3 && Double(open) <= limit, "stdin, stdout and stderr at least: \(open) of \(limit)")
        #expect((reading.cpuSeconds ?? 0) > 0)
        var buffer: [UInt8] = []
        metrics.emit(into: &buffer)
        let text = String(decoding: buffer, as: UTF8.self)
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                     "process_open_fds", "process_max_fds", "process_start_time_seconds"] {
            #expect(text.contains("# HELP \(name) ") && text.contains("# TYPE \(name) ") && text.contains("\n\(name) "), "\(name):\n\(text)")
        }
        #expect(ProcessMetrics.number(.infinity) == "+Inf" && ProcessMetrics.number(1024) == "1024")
    }
}
