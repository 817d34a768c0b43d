// Runs the tandem executable as a user would, for the tests of the command line.
#pragma once

#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

namespace tandem::test {

struct Run {
  int code = -1;  // the exit status; -1 when it crashed or did not finish in a minute
  QString out;
  QString err;
};

// `working_directory` empty: the test's own.
inline Run run_tandem(const QStringList& args, const QProcessEnvironment& env,
                      const QString& working_directory = {}) {
  QProcess p;
  p.setProcessEnvironment(env);
  if (!working_directory.isEmpty()) p.setWorkingDirectory(working_directory);
  p.start(QStringLiteral(TANDEM_EXECUTABLE), args);
  Run r;
  if (!p.waitForFinished(60000)) {
    p.kill();
    return r;
  }
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

}  // namespace tandem::test
