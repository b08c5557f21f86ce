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
        subcommands: [
            Check.self, Query.self, Import.self, SchemaCommand.self, IndexCommand.self, Simulate.self, Shell.self,
            Zones.self, Modify.self, Changes.self, Subscriptions.self, Notifications.self, AssetCommand.self, Serve.self, Token.self, Users.self, Migrate.self,
            KeyValueStoreCommand.self, DriveCommand.self,
        ],
        defaultSubcommand: Shell.self
    )

    /// Exit statuses: 0 success, 1 an invalid predicate (or a refused operation), 2 a usage or input error.
    static func main() {
        ParentWatch.startIfAsked()
        do {
            var command = try parseAsRoot(Self.arguments(Array(CommandLine.arguments.dropFirst())))
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

extension KQueryCommand {
    /// The command line as ArgumentParser should read it. ArgumentParser takes every word that
    /// starts with `-` for an option, so a predicate such as `-27 <= n AND n < 3` would be refused
    /// ("Missing expected argument '<predicate>'"). A word that starts with `-` and then something
    /// other than a letter (an option's name) is a value: a negative number right after an option
    /// becomes that option's `--name=value`; anything else moves behind a `--`, where only
    /// positional arguments are read. Words after a `--` the user wrote are left as they are.
    static func arguments(_ words: [String]) -> [String] {
        var kept: [String] = []
        var positional: [String] = []
        for (index, word) in words.enumerated() {
            if word == "--" {
                kept.append(contentsOf: words[index...])
                return kept + positional
            }
            guard isDashValue(word) else {
                kept.append(word)
                continue
            }
            if isNumber(word), let option = kept.last, option.hasPrefix("--"), !option.contains("="), option.count > 2 {
                kept[kept.count - 1] = option + "=" + word
            } else {
                positional.append(word)
            }
        }
        return positional.isEmpty ? kept : kept + ["--"] + positional
    }

    /// `-` followed by something that cannot start an option name: `-27 <= n`, `-0.5`, `- x`.
    private static func isDashValue(_ word: String) -> Bool {
        let scalars = Array(word.unicodeScalars.prefix(2))
        guard scalars.count == 2, scalars[0] == "-" else { return false }
        let next = scalars[1]
        return !(next.properties.isAlphabetic || next == "-")
    }

    private static func isNumber(_ word: String) -> Bool {
        word.wholeMatch(of: /-[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?/) != nil
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
