import Foundation
import PackagePlugin

/// Writes the git commit Herald is built from into `BuildCommit.swift` of the target it serves
/// (`HeraldBuildInfo`), so `herald --version`, the worker's startup log line and the
/// `herald_build_info` gauge name the exact code running.
///
/// A build command whose inputs are the repository's `HEAD` and its reflog (`logs/HEAD`, which
/// git appends to on every commit, checkout, reset and pull): the build reruns it whenever the
/// checked-out commit may have moved. (A prebuild command was meant to run on every build, but
/// SwiftPM runs those only when it evaluates the plugins again, after a manifest change, so an
/// incremental build after a commit kept the old commit.) The script rewrites the file only when
/// the commit changed, so an unchanged commit recompiles nothing. Where there is no git
/// repository (a source tarball, a Docker build context without `.git`) the commit comes from
/// the environment variable `HERALD_COMMIT`, else it is `unknown`.
@main
struct BuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let package = context.package.directoryURL
        let output = context.pluginWorkDirectoryURL.appending(path: "Generated").appending(path: "BuildCommit.swift")
        let script = package.appending(path: "Plugins/BuildInfo/build-commit.sh")
        let environment = ProcessInfo.processInfo.environment
        return [
            .buildCommand(
                displayName: "Herald build info: git commit of \(package.path)",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [script.path, package.path, output.path],
                environment: [
                    "PATH": environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin",
                    "HERALD_COMMIT": environment["HERALD_COMMIT"] ?? "",
                ],
                inputFiles: [script] + BuildInfo.gitStateFiles(of: package),
                outputFiles: [output]),
        ]
    }

    /// The files that change when the checked-out commit does: `HEAD` and `logs/HEAD` of the
    /// repository's git directory (`.git`, or the directory a worktree's `.git` file names).
    /// Empty outside a repository.
    static func gitStateFiles(of package: URL) -> [URL] {
        let dotGit = package.appending(path: ".git")
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dotGit.path, isDirectory: &isDirectory) else { return [] }
        var gitDirectory = dotGit
        if !isDirectory.boolValue {
            // A worktree or submodule: ".git" holds "gitdir: <path>".
            guard let text = try? String(contentsOf: dotGit, encoding: .utf8),
                  let line = text.split(separator: "\n").first(where: { $0.hasPrefix("gitdir:") }) else { return [] }
            let path = line.dropFirst("gitdir:".count).trimmingCharacters(in: .whitespaces)
            gitDirectory = path.hasPrefix("/") ? URL(fileURLWithPath: path) : package.appending(path: path)
        }
        return ["HEAD", "logs/HEAD"].map { gitDirectory.appending(path: $0) }
            .filter { FileManager.default.fileExists(atPath: $0.path) }
    }
}
