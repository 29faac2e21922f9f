import Glibc

/// The exact conditions of a run, stated next to its numbers: the machine and its load, what ran
/// (workers, connections, streams, batch), the load's shape, the emulator's latency and faults,
/// and the versions. Gathered by `LoadRun` at the start; the load average again at the end.
public struct RunConditions: Sendable {
    public var date = ""
    public var cores = 0
    public var cpuModel = ""
    public var kernel = ""
    public var loadAverageAtStart = ""
    public var loadAverageAtEnd = ""
    public var mode = ""
    /// The mode in a few words, for the plot's subtitle: `drain`, `steady at 8000 jobs/s`.
    public var shortMode = ""
    public var workers = ""
    public var connections = 0
    public var maxStreams = 0
    public var batch = ""
    /// Whether the workers wrote every outcome to the results stream (`--results`).
    public var results = false
    public var threads = 1
    public var payloadBytes = 0
    public var tokens = 0
    public var fanout = 1
    public var collapseRatio = 0.0
    public var pushTypes = ""
    public var emulatorLatencyMilliseconds = 0
    public var faults = ""
    public var redis = ""
    public var emulator = ""
    public var heraldVersion = ""
    public var swiftVersion = ""
    public var gitCommit = ""

    public init() {}

    /// The machine's side of the conditions, read now.
    public static func machine() -> RunConditions {
        var conditions = RunConditions()
        conditions.date = utcNow()
        conditions.cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        conditions.cpuModel = cpuModelName()
        conditions.kernel = kernelRelease()
        conditions.loadAverageAtStart = loadAverage()
        return conditions
    }

    /// The 1, 5 and 15 minute load averages, as /proc/loadavg says them.
    public static func loadAverage() -> String {
        guard let text = readProcFile("/proc/loadavg") else { return "unknown" }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    static func cpuModelName() -> String {
        guard let text = readProcFile("/proc/cpuinfo") else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") { return String(line[line.index(after: colon)...]).trimmingSpaces }
        }
        return "unknown"
    }

    static func kernelRelease() -> String {
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let machine = withUnsafeBytes(of: &names.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return "Linux \(release) \(machine)"
    }

    static func utcNow() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        _ = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The git commit the executable was built from, when it sits in a work tree (`abc123def456`,
    /// with `-dirty` when tracked files changed); "unknown" otherwise.
    public static func gitCommit(executable: String) -> String {
        var directory = resolvedPath(executable)
        while let slash = directory.lastIndex(of: "/"), !directory.isEmpty {
            directory = String(directory[..<slash])
            if access(directory + "/.git", F_OK) == 0 {
                guard let commit = commandOutput("git -C '\(directory)' rev-parse --short=12 HEAD 2>/dev/null"), !commit.isEmpty else { break }
                let dirty = commandOutput("git -C '\(directory)' status --porcelain -uno 2>/dev/null") ?? ""
                return commit + (dirty.isEmpty ? "" : "-dirty")
            }
        }
        return "unknown"
    }

    static func resolvedPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The first line a shell command prints, or nil.
    static func commandOutput(_ command: String) -> String? {
        guard let pipe = popen(command, "r") else { return nil }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = fread(&buffer, 1, buffer.count, pipe)
            if count <= 0 { break }
            bytes.append(contentsOf: buffer[0..<count])
        }
        pclose(pipe)
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
    }

    /// The conditions as `name: value` lines, in reading order.
    public var lines: [(String, String)] {
        [
            ("date", date),
            ("machine", "\(cores) cores, \(cpuModel), \(kernel)"),
            ("load average", "\(loadAverageAtStart) at start, \(loadAverageAtEnd) at end (1/5/15 min)"),
            ("mode", mode),
            ("workers", workers),
            ("connections × streams", "\(connections) × \(maxStreams) per worker thread"),
            ("batch", batch),
            ("results", results ? "on (every outcome written to the results stream)" : "off"),
            ("payload", "\(payloadBytes) bytes, \(tokens) tokens, fan-out \(fanout), collapse ratio \(collapseRatio), push types \(pushTypes)"),
            ("emulator", "\(emulator), latency \(emulatorLatencyMilliseconds) ms, faults: \(faults)"),
            ("redis", redis),
            ("versions", "herald \(heraldVersion), Swift \(swiftVersion), git \(gitCommit)"),
        ]
    }
}
