import ArgumentParser
import KQuery

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `kquery`: the command line over the KQuery library. Each subcommand parses its flags, calls the
/// library, and prints; every rule lives in the library.
@main
struct KQueryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kquery",
        abstract: "CloudKit's predicate language, queries and subscriptions, on the command line.",
        subcommands: [Check.self, Query.self, Import.self, SchemaCommand.self, IndexCommand.self, Simulate.self, Shell.self],
        defaultSubcommand: Shell.self
    )

    /// Exit statuses: 0 success, 1 an invalid predicate (or a refused operation), 2 a usage or input error.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let exit as ExitCode {
            Terminal.exit(exit.rawValue)
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                print(message)
                Terminal.exit(0)
            }
            Terminal.writeError(message)
            Terminal.exit(code == .validationFailure ? 2 : code.rawValue)
        }
    }
}

/// Output and exit, in one place.
enum Terminal {
    static func writeError(_ text: String) {
        fflush(nil)
        var line = text
        if !line.hasSuffix("\n") { line += "\n" }
        writeAll(line, to: 2)
    }

    /// Writes straight to a file descriptor (stdio's globals are not concurrency-safe in Swift 6).
    static func writeAll(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written <= 0 { return }
                offset += written
            }
        }
    }

    static func exit(_ code: Int32) -> Never {
        fflush(nil)
        #if canImport(Glibc)
        Glibc.exit(code)
        #else
        Darwin.exit(code)
        #endif
    }

    /// Colour only on a terminal, and never when NO_COLOR is set.
    static var colorOnStandardError: Bool {
        isatty(2) == 1 && getenv("NO_COLOR") == nil
    }

    static var colorOnStandardOutput: Bool {
        isatty(1) == 1 && getenv("NO_COLOR") == nil
    }
}

/// A failure already reported to the user: exit with the status only.
struct ReportedFailure: Error {
    var status: Int32
}
