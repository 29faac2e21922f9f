import ArgumentParser
import Glibc
import HeraldConfig

extension ConfigFile {
    /// Reads and checks the file; errors say which file and what is wrong.
    static func load(_ path: String) throws -> ConfigFile {
        let text: String
        do {
            text = try readFile(path)
        } catch let error as ValidationError {
            throw ValidationError("cannot read the config file (--config or HERALD_CONFIG): \(error.message)")
        }
        do {
            return try ConfigFile.parse(text, path: path)
        } catch {
            throw ValidationError(error.description)
        }
    }
}

/// Warns when a secret file can be read by others than its owner; never prints its content.
func checkSecretFilePermissions(_ path: String, warn: (String) -> Void) {
    var info = stat()
    guard stat(path, &info) == 0 else { return }
    // World-readable is always wrong; group-readable only when the group is not Herald's own
    // (Kubernetes mounts secrets with the pod's fsGroup).
    let worldReadable = info.st_mode & 0o004 != 0
    let foreignGroupReadable = info.st_mode & 0o040 != 0 && info.st_gid != getegid()
    if worldReadable || foreignGroupReadable {
        let mode = String(info.st_mode & 0o777, radix: 8)
        warn("the secret file \(path) is readable by \(worldReadable ? "everyone" : "another group") (mode \(mode)); run: chmod 600 \(path)")
    }
}

/// Reads a secret (e.g. a PKCS#12 password) from a file, without its trailing newline.
func readSecretFile(_ path: String, warn: (String) -> Void) throws -> String {
    checkSecretFilePermissions(path, warn: warn)
    var text = try readFile(path)
    while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
    return text
}
