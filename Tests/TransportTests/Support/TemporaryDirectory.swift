import Foundation

/// A fresh, private directory under the system's temporary directory, deleted with everything in it
/// when the last reference goes away.
///
/// Use one per test (`let directory = try TemporaryDirectory()`), so tests running in parallel never
/// share files. Immutable, so it can be captured by concurrent tasks.
final class TemporaryDirectory: Sendable {
    /// The directory's absolute path.
    let path: String

    /// Creates the directory (mode 0700). `prefix` helps to find leftovers of a crashed run.
    init(prefix: String = "herald-test") throws {
        let template = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(prefix).XXXXXX")
        var bytes = Array(template.utf8CString)
        guard let created = mkdtemp(&bytes) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: template])
        }
        path = String(cString: created)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    /// The path of `name` inside the directory (nothing is created).
    func path(_ name: String) -> String {
        (path as NSString).appendingPathComponent(name)
    }

    /// Writes `contents` to `name` inside the directory and returns its path.
    @discardableResult
    func write(_ contents: String, to name: String) throws -> String {
        try write(Array(contents.utf8), to: name)
    }

    /// Writes `bytes` to `name` inside the directory and returns its path.
    @discardableResult
    func write(_ bytes: [UInt8], to name: String) throws -> String {
        let file = path(name)
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        return file
    }

    /// The contents of `name` inside the directory.
    func read(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: URL(fileURLWithPath: path(name))))
    }

    /// The permission bits of `name` (for example 0o600).
    func permissions(of name: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path(name))
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }
}
