import Glibc
import Transport

/// CPU time and memory of the worker processes, read from /proc.
///
/// `sample()` is called about every 200 ms by `LoadRun` and once more at the end, before the
/// workers are stopped: it keeps each process's peak VmHWM (the kernel's own high-water mark) and
/// the largest VmRSS it saw, and the last utime + stime. Linux only.
public final class ProcessSampler {
    public struct Reading: Sendable, Equatable {
        public var cpuSeconds = 0.0
        public var peakHWMBytes = 0
        public var maxRSSBytes = 0
    }

    public private(set) var readings: [pid_t: Reading] = [:]
    private let ticksPerSecond: Double

    public init(pids: [pid_t]) {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        ticksPerSecond = Double(ticks > 0 ? ticks : 100)
        for pid in pids { readings[pid] = Reading() }
    }

    /// Reads every process once; a process that has gone keeps its last reading.
    public func sample() {
        for pid in readings.keys {
            var reading = readings[pid]!
            if let cpu = ProcessSampler.cpuTicks(pid: pid) { reading.cpuSeconds = Double(cpu) / ticksPerSecond }
            if let memory = ProcessSampler.memory(pid: pid) {
                reading.peakHWMBytes = max(reading.peakHWMBytes, memory.hwm)
                reading.maxRSSBytes = max(reading.maxRSSBytes, memory.rss)
            }
            readings[pid] = reading
        }
    }

    /// utime + stime of all workers, seconds.
    public var totalCPUSeconds: Double { readings.values.reduce(0) { $0 + $1.cpuSeconds } }
    /// The largest VmHWM of one worker.
    public var peakHWMBytes: Int { readings.values.map(\.peakHWMBytes).max() ?? 0 }
    /// The largest VmRSS sample of one worker.
    public var maxRSSBytes: Int { readings.values.map(\.maxRSSBytes).max() ?? 0 }

    /// utime + stime in clock ticks, from /proc/PID/stat (fields 14 and 15, counted after the
    /// command name, which may hold spaces and parentheses).
    static func cpuTicks(pid: pid_t) -> Int? {
        readProcFile("/proc/\(pid)/stat").flatMap(cpuTicks(statText:))
    }

    static func cpuTicks(statText text: String) -> Int? {
        guard let close = text.lastIndex(of: ")") else { return nil }
        // After the name: field 3 (state) is [0], so utime (14) is [11] and stime (15) is [12].
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return user + system
    }

    /// VmHWM and VmRSS in bytes, from /proc/PID/status.
    static func memory(pid: pid_t) -> (hwm: Int, rss: Int)? {
        guard let text = readProcFile("/proc/\(pid)/status") else { return nil }
        var hwm = 0, rss = 0
        for line in text.split(separator: "\n") {
            if line.hasPrefix("VmHWM:") { hwm = kilobytes(line) }
            if line.hasPrefix("VmRSS:") { rss = kilobytes(line) }
        }
        return (hwm, rss)
    }

    private static func kilobytes(_ line: Substring) -> Int {
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count >= 2, let value = Int(parts[1]) else { return 0 }
        return value * 1024
    }
}

/// A small /proc (or other text) file, whole; nil when it cannot be read.
func readProcFile(_ path: String) -> String? {
    try? PEMFile.read(path: path)
}
