// Small files are written whole or not at all: the old file stays until the new one is whole,
// no .part is left behind, and a failed write says why in words.
#include <QtTest>

#include <sys/resource.h>
#include <sys/stat.h>
#include <QTemporaryDir>

#include <csignal>
#include <fstream>
#include <sstream>

#include "engine/files/whole_file.h"

using namespace tandem;

namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

class TestWholeFile : public QObject {
  Q_OBJECT

 private slots:
  void writesAndReplaces() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/profile.json";
    QCOMPARE(files::write_whole_file(path, "first\n"), std::string());
    QCOMPARE(contents(path), std::string("first\n"));
    const std::string big(3 << 20, 'x');  // more than one write() may take at once
    QCOMPARE(files::write_whole_file(path, big), std::string());
    QCOMPARE(contents(path), big);
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path + ".part")));
    struct stat st {};
    QCOMPARE(::stat(path.c_str(), &st), 0);
    QCOMPARE(st.st_mode & S_IXUSR, 0u);
  }

  void executableWhenAsked() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/launch.sh";
    QCOMPARE(files::write_whole_file(path, "#!/bin/sh\n", /*executable=*/true), std::string());
    struct stat st {};
    QCOMPARE(::stat(path.c_str(), &st), 0);
    QVERIFY(st.st_mode & S_IXUSR);
  }

  void aMissingFolderIsSaid() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/no/such/file.json";
    const std::string why = files::write_whole_file(path, "x");
    QVERIFY2(why.find("No such file or directory") != std::string::npos, why.c_str());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path + ".part")));
  }

  // A write cut short (here by the limit on file size, as a full disk would) leaves the old
  // file as it was and no .part beside it.
  void aFailedWriteKeepsTheOldFile() {
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/stats.json";
    QCOMPARE(files::write_whole_file(path, "old"), std::string());
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit previous{};
    QCOMPARE(::getrlimit(RLIMIT_FSIZE, &previous), 0);
    rlimit small = previous;
    small.rlim_cur = 4096;
    QCOMPARE(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string why = files::write_whole_file(path, std::string(1 << 20, 'y'));
    ::setrlimit(RLIMIT_FSIZE, &previous);
    std::signal(SIGXFSZ, previous_handler);
    QVERIFY2(why.find("ulimit -f") != std::string::npos, why.c_str());
    QCOMPARE(contents(path), std::string("old"));
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path + ".part")));
  }

  void wordsForAFullDisk() {
    QVERIFY(files::write_failure_words(ENOSPC).find("the disk is full") == 0);
    QVERIFY(files::write_failure_words(EACCES).find("Permission denied") == 0);
  }
};

QTEST_GUILESS_MAIN(TestWholeFile)
#include "tst_whole_file.moc"
