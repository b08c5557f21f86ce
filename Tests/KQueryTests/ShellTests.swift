import Foundation
import Testing

/// The interactive shell (`kquery` with no subcommand, `kquery -f FILE`), driven through the binary:
/// scripted sessions through a pipe, and one session through a pseudo-terminal.
@Suite("Shell")
struct ShellTests {
    static var records: String { Fixtures.url("restaurants.ndjson").path }

    /// Runs `lines` through a pipe into `kquery` (plus `arguments`).
    func session(_ lines: [String], arguments: [String] = []) throws -> KQueryBinary.Run {
        try KQueryBinary.run(arguments, input: lines.joined(separator: "\n") + "\n")
    }

    func lines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty }
    }

    @Test func loadTypesAndFields() throws {
        let run = try session([".load \(Self.records)", ".types", ".fields Restaurant", ".fields Chef"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.standardError.isEmpty)
        #expect(run.standardOutput == """
            loaded 6 records (2 types)
            Chef        1
            Restaurant  5
            blurb     STRING
            chef      REFERENCE
            cuisine   STRING
            location  LOCATION
            name      STRING
            opened    TIMESTAMP
            score     DOUBLE
            seats     INT64, DOUBLE
            tags      STRING_LIST
            name   STRING
            seats  INT64

            """)
    }

    @Test func queryLineWithSortByAndLimit() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names",
            "Restaurant WHERE cuisine == 'french' SORT BY seats DESC",
            "-- keywords are case-insensitive; LIMIT applies after sorting",
            "Restaurant where cuisine == 'french' sort by seats desc limit 2",
            "Restaurant WHERE seats > 10 SORT BY score DESC, seats ASC LIMIT 3",
            "Chef",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p5", "p1", "p3", "p5", "p1", "p2", "p4", "p1", "alain"])
    }

    @Test func sortByAndLimitOnlyOutsideQuotes() throws {
        let run = try session([
            ".load \(Self.records)", ".mode count",
            "Restaurant WHERE name == 'a SORT BY b LIMIT 2'",
            "Restaurant WHERE cuisine IN {'french', 'SORT BY'} LIMIT 1",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "0", "1"])
    }

    @Test func defaultSortAndLimit() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names", ".sort seats DESC", ".limit 2", "Restaurant",
            ".limit", "Restaurant WHERE cuisine == 'french'", ".sort", ".mode count", "Restaurant",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p5", "p1", "p5", "p1", "p3", "5"])
    }

    @Test func tableModeIsTheDefault() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE cuisine == 'mexican'"])
        #expect(run.status == 0, "\(run.standardError)")
        let output = lines(run.standardOutput)
        #expect(output.count == 5)
        #expect(output[1].hasPrefix("recordName  blurb"))
        #expect(output[2].hasPrefix("----------"))
        #expect(output[3].hasPrefix("p4          Tacos and terraces"))
        #expect(output[4] == "(1 record)")
    }

    @Test func variablesBindWithSet() throws {
        let run = try session([
            ".load \(Self.records)", ".mode names", ".set c \"french\"", ".set $few 30",
            "Restaurant WHERE cuisine == $c AND seats > $few SORT BY seats", ".set",
        ])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p1", "p5", "$c = \"french\"", "$few = 30"])
    }

    @Test func unboundVariableAndBadJSONAreErrors() throws {
        let run = try session([".set x oops", "Restaurant WHERE cuisine == $nope"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardError.contains("error: .set x: invalid JSON"))
        #expect(run.standardError.contains("nope"))
    }

    @Test func extendedProfileEnablesOr() throws {
        let query = "Restaurant WHERE cuisine == 'mexican' OR seats < 20"
        let refused = try session([".load \(Self.records)", ".mode names", query])
        #expect(refused.status == 1)
        #expect(refused.standardError.contains("Invalid compound predicate type: OR"))
        let run = try session([".load \(Self.records)", ".mode names", ".profile extended", ".profile", query + " SORT BY seats"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "extended", "p2", "p4"])
    }

    @Test func explain() throws {
        let run = try session([".load \(Self.records)", ".explain Restaurant WHERE cuisine = 'french' && seats BETWEEN {10, 50}"])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == [
            "loaded 6 records (2 types)",
            "predicate: cuisine == \"french\" AND seats BETWEEN {10, 50}",
            #"filterBy:  [{"comparator":"EQUALS","fieldName":"cuisine","fieldValue":{"value":"french","type":"STRING"}},{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":10,"type":"INT64"}},{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"seats","fieldValue":{"value":50,"type":"INT64"}}]"#,
            "plan:      full scan of 5 Restaurant records (no indexes yet)",
        ])
        let invalid = try session([".explain seats > 1 OR seats < 0"])
        #expect(invalid.status == 1)
        #expect(invalid.standardError.contains("^"))
    }

    @Test func timer() throws {
        let run = try session([".load \(Self.records)", ".timer on", ".mode count", "Restaurant", ".timer off", "Chef"])
        #expect(run.status == 0, "\(run.standardError)")
        let output = lines(run.standardOutput)
        #expect(output.count == 4)
        #expect(output[1] == "5")
        #expect(output[2].wholeMatch(of: /Run Time: real \d+\.\d{6}/) != nil, "\(output[2])")
        #expect(output[3] == "1")
    }

    @Test func invalidPredicateStopsTheScript() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE seats >> 3", ".types"])
        #expect(run.status == 1)
        #expect(run.standardOutput == "loaded 6 records (2 types)\n")
        let error = lines(run.standardError)
        #expect(error.count == 3, "\(run.standardError)")
        #expect(error.first?.hasPrefix("error: 1:") == true)
        #expect(error.dropFirst().first == "  seats >> 3")
        #expect(error.last?.trimmingCharacters(in: .whitespaces).hasPrefix("^") == true)
        #expect(!run.standardError.contains("\u{1B}["))
    }

    @Test func keepGoingRunsTheRest() throws {
        let run = try session([".load \(Self.records)", "Restaurant WHERE seats >> 3", ".types"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardOutput.contains("Restaurant  5"))
        #expect(run.standardError.contains("^"))
        let clean = try session([".load \(Self.records)", ".types"], arguments: ["--keep-going"])
        #expect(clean.status == 0)
    }

    @Test func scriptFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = directory.appendingPathComponent("script.kq")
        try """
            -- a script
            .load \(Self.records)
            .mode names

            Restaurant WHERE cuisine == 'french' \\
                AND seats > 30 SORT BY seats
            Restaurant WHERE cuisine IN {'japanese',
                'mexican'} SORT BY seats DESC
            .quit
            .types
            """.write(to: script, atomically: true, encoding: .utf8)
        let run = try KQueryBinary.run(["-f", script.path])
        #expect(run.status == 0, "\(run.standardError)")
        #expect(lines(run.standardOutput) == ["loaded 6 records (2 types)", "p1", "p5", "p4", "p2"])

        let failing = directory.appendingPathComponent("failing.kq")
        try ".frobnicate\n.load \(Self.records)\n".write(to: failing, atomically: true, encoding: .utf8)
        let stopped = try KQueryBinary.run(["-f", failing.path])
        #expect(stopped.status == 1)
        #expect(stopped.standardOutput.isEmpty)
        let kept = try KQueryBinary.run(["-f", failing.path, "--keep-going"])
        #expect(kept.status == 1)
        #expect(kept.standardOutput == "loaded 6 records (2 types)\n")

        let missing = try KQueryBinary.run(["-f", directory.appendingPathComponent("nope.kq").path])
        #expect(missing.status == 2)
    }

    @Test func unknownCommand() throws {
        let run = try session([".foo bar"])
        #expect(run.status == 1)
        #expect(run.standardError == "error: unknown command '.foo' (try .help)\n")
    }

    @Test func notAvailableCommands() throws {
        let expected = [
            ".open": "error: .open is not available yet: the persistent store is not built",
            ".save": "error: .save is not available yet: the persistent store is not built",
            ".delete": "error: .delete is not available yet: the persistent store is not built",
            ".subscribe": "error: .subscribe is not available yet: subscriptions are not built",
            ".subscriptions": "error: .subscriptions is not available yet: subscriptions are not built",
            ".unsubscribe": "error: .unsubscribe is not available yet: subscriptions are not built",
        ]
        let help = try session([".help"])
        #expect(help.status == 0)
        for (command, message) in expected {
            let run = try session([command + " x"])
            #expect(run.status == 1)
            #expect(run.standardError == message + "\n")
            #expect(help.standardOutput.split(separator: "\n").contains { $0.hasPrefix(command + " ") && $0.hasSuffix("(not available yet)") })
        }
        for command in [".load", ".types", ".fields", ".profile", ".set", ".mode", ".sort", ".limit", ".timer", ".explain", ".quit", ".exit"] {
            #expect(help.standardOutput.split(separator: "\n").contains { $0.hasPrefix(command + " ") }, "\(command)")
        }
    }

    @Test func malformedRecordsFileLoadsNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bad.ndjson")
        try #"{"recordName":"a","recordType":"T","fields":{}}"#.appending("\n{oops\n").write(to: file, atomically: true, encoding: .utf8)
        let run = try session([".load \(file.path)", ".types"], arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(run.standardError.hasPrefix("error: \(file.path):2: "))
        #expect(run.standardOutput == "no records loaded (try .load FILE)\n")
    }

    @Test func quitStopsWithStatusZero() throws {
        let run = try session([".load \(Self.records)", ".quit", ".frobnicate"])
        #expect(run.status == 0)
        #expect(run.standardError.isEmpty)
    }

    @Test func badQueryLines() throws {
        let run = try session(["Restaurant cuisine == 'french'", "Restaurant WHERE", "Restaurant LIMIT 0", "Restaurant SORT BY seats UP", "== 3"],
                              arguments: ["--keep-going"])
        #expect(run.status == 1)
        #expect(lines(run.standardError) == [
            "error: expected WHERE after the record type 'Restaurant'",
            "error: WHERE needs a predicate",
            "error: LIMIT needs a number of at least 1, got '0'",
            "error: sort direction must be ASC or DESC, got 'UP'",
            "error: expected 'TYPE [WHERE PREDICATE]' or a dot-command, got '==' (try .help)",
        ])
    }

    // MARK: - Through a pseudo-terminal

    static let hasPexpect: Bool = {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", "import pexpect"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }()

    /// Types `Resta<TAB> WHERE cui<TAB> == 'french'` on a pseudo-terminal (python3's pexpect) and reads
    /// the screen back through a small VT100 emulator; also Ctrl-C on a half-typed line and `.quit`.
    @Test(.enabled(if: hasPexpect, "needs python3 with pexpect"), .timeLimit(.minutes(1)))
    func tabCompletionOnATerminal() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kquery-shell-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let driver = directory.appendingPathComponent("drive_shell.py")
        try Self.driverScript.write(to: driver, atomically: true, encoding: .utf8)
        let transcript = directory.appendingPathComponent("screen.txt")

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", driver.path, KQueryBinary.url.path, Self.records, directory.path, transcript.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(45)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            Issue.record("the pty driver did not finish in time")
            return
        }
        let screen = (try? String(contentsOf: transcript, encoding: .utf8)) ?? ""
        let rows = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(rows.first == "STATUS exit 0", "\(screen)")
        #expect(rows.contains("kquery> Restaurant WHERE cuisine == 'french'"), "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p1 ") && $0.contains("Le Petit Zinc") }, "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p3 ") && $0.contains("Chez Rosé") }, "\(screen)")
        #expect(rows.contains { $0.hasPrefix("p5 ") && $0.contains("Far Away Inn") }, "\(screen)")
        #expect(rows.contains("(3 records)"), "\(screen)")
        // Ctrl-C dropped the half-typed line: the next prompt ran .types, and nothing failed.
        #expect(rows.contains("kquery> Restaurant WHERE sea"), "\(screen)")
        #expect(rows.contains("Restaurant  5"), "\(screen)")
        #expect(!screen.contains("error:"), "\(screen)")
        // History is kept in $HOME/.kquery_history, with the completed words.
        let history = (try? String(contentsOf: directory.appendingPathComponent(".kquery_history"), encoding: .utf8)) ?? ""
        #expect(history.contains(#"Restaurant\040WHERE\040cuisine\040==\040'french'"#) || history.contains("Restaurant WHERE cuisine == 'french'"), "\(history)")
        #expect(!history.contains("WHERE sea"), "\(history)")
    }

    static let driverScript = #"""
        import os, re, sys
        import pexpect

        binary, fixture, home, transcript_path = sys.argv[1:5]

        class Screen:
            """A VT100 subset, enough for libedit's redraws: CR, LF, BS, CHA, CUF, CUB, CUU, CUD, EL, ED."""
            def __init__(self):
                self.lines = [[]]; self.row = 0; self.col = 0
            def down(self, n):
                self.row += n
                while len(self.lines) <= self.row: self.lines.append([])
            def put(self, ch):
                line = self.lines[self.row]
                while len(line) < self.col: line.append(' ')
                if self.col < len(line): line[self.col] = ch
                else: line.append(ch)
                self.col += 1
            def feed(self, text):
                i = 0
                while i < len(text):
                    ch = text[i]
                    if ch == '\x1b':
                        m = re.match(r'\x1b\[([0-9;?]*)([A-Za-z@])', text[i:])
                        if not m:
                            i += 2; continue
                        args = [int(a) for a in m.group(1).replace('?', '').split(';') if a]
                        n = args[0] if args else 1
                        cmd = m.group(2)
                        if cmd == 'G': self.col = max(0, n - 1)
                        elif cmd == 'C': self.col += n
                        elif cmd == 'D': self.col = max(0, self.col - n)
                        elif cmd == 'A': self.row = max(0, self.row - n)
                        elif cmd == 'B': self.down(n)
                        elif cmd == 'K': del self.lines[self.row][self.col:]
                        elif cmd == 'J': del self.lines[self.row][self.col:]; del self.lines[self.row + 1:]
                        i += len(m.group(0)); continue
                    if ch == '\r': self.col = 0
                    elif ch == '\n': self.down(1)
                    elif ch == '\b': self.col = max(0, self.col - 1)
                    elif ord(ch) >= 32: self.put(ch)
                    i += 1
            def text(self):
                return '\n'.join(''.join(line).rstrip() for line in self.lines)

        env = dict(os.environ)
        env['HOME'] = home
        env['TERM'] = 'xterm'
        env.pop('NO_COLOR', None)
        screen = Screen()
        child = pexpect.spawn(binary, [], env=env, encoding='utf-8', timeout=10, dimensions=(40, 220))

        def wait(text):
            child.expect_exact(text)
            screen.feed(child.before + child.after)

        status = 'not finished'
        try:
            wait('kquery> ')
            child.send('.load ' + fixture + '\r')
            wait('loaded 6 records')
            wait('kquery> ')
            child.send('Resta\t')
            wait('urant ')
            child.send('WHERE cui\t')
            wait('sine ')
            child.send("== 'french'\r")
            wait('(3 records)')
            wait('kquery> ')
            child.send('Restaurant WHERE sea')
            wait('sea')
            child.send('\x03')
            wait('kquery> ')
            child.send('.types\r')
            wait('Restaurant  5')
            wait('kquery> ')
            child.send('.quit\r')
            child.expect(pexpect.EOF)
            screen.feed(child.before)
            child.close()
            status = 'exit %s' % child.exitstatus
        except Exception as error:
            status = 'failed: %s: %s' % (type(error).__name__, str(error).splitlines()[0] if str(error) else '')
            child.close(force=True)
        with open(transcript_path, 'w') as out:
            out.write('STATUS ' + status + '\n')
            out.write(screen.text() + '\n')
        """#
}
