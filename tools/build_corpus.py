#!/usr/bin/env python3
"""Rebuild autoround.cpp's built-in calibration corpus (src/quant/corpus/builtin.txt) and its NOTICE.

The corpus is about 2 MB of varied, redistributable text: novels and stories, plays, encyclopedic and
statistical text (CIA World Factbook, 1911 Encyclopaedia Britannica, 1990 US Census), this project's
own source and docs, and literature in French, German, Spanish, Italian, Portuguese, Russian, Chinese,
Japanese and Greek. Every piece is an excerpt taken from a pinned commit of a public git repository
(MANIFEST below), cleaned, cut into chunks of about 16 kB at paragraph boundaries and interleaved by
kind, so that any prefix of the file is already varied. The first piece is the project's original
5 kB calibration text (read from PROJECT_COMMIT of this repository, since builtin.txt is overwritten).

Standard library only (Python 3.8+); needs `git` on PATH.

How to run
----------
1. Get a copy of each source repository named in MANIFEST (a bare mirror or a clone; the pinned
   commits must be present), laid out as MIRRORS/<owner>+<name>/repo (a bare git dir or a work tree
   whose .git is inside it). For example, for each repository:
       git clone --bare https://github.com/<owner>/<name> MIRRORS/<owner>+<name>/repo
   (A single repository elsewhere can be named with --repo owner/name=/path/to/git-dir.)
2. From the repository root:
       python3 tools/build_corpus.py --mirrors MIRRORS
   writes src/quant/corpus/builtin.txt and src/quant/corpus/NOTICE and prints the byte share of each
   kind and language. --check rebuilds in memory and exits 1 if either file differs from the
   committed one; --out / --notice write elsewhere.

The output is deterministic: same commits in, same bytes out. The script refuses to write a corpus
that is not valid UTF-8, that contains control characters other than \\n and \\t, that mentions
"Project Gutenberg" (the Gutenberg license allows redistributing public-domain texts once every
reference to it is removed; the NOTICE names the origin instead), or that contains the sequence
")AR_CORPUS" (which once terminated the raw string literal the corpus was embedded in).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
import unicodedata

# The project's own files (its original calibration text, source and docs) are read from this commit of
# this repository, so the corpus does not change when the code does. Bump it deliberately.
PROJECT_COMMIT = "144f06d53885fb16df56d1d72910807a63dc6864"

CHUNK = 16 * 1024  # target chunk size for interleaving (bytes)

PG_LICENSE = ("public domain in the USA; Project Gutenberg eBook #{pg}, Gutenberg header, footer and "
              "license boilerplate removed (the PG license permits this for public-domain texts once all "
              "references to Project Gutenberg are removed)")
PG_REPO_NOTE = ("GITenberg mirror of the Project Gutenberg text; only the plain-text file is used (CC BY-NC "
                "metadata in some GITenberg repos concerns the cover art of their 'Recovering the Classics' "
                "edition, not the public-domain text)")

# Each piece: id, kind (own|prose|dialogue|factual|code|lang), lang, genre, title, author, repo, commit,
# path, fmt, size (target bytes of cleaned text), start (regex where the excerpt begins), unwrap
# (join hard-wrapped lines of prose paragraphs), license.
MANIFEST = [
    # ---------------------------------------------------------------- English prose (novels/stories)
    dict(id="pride", kind="prose", lang="en", title="Pride and Prejudice", author="Jane Austen",
         repo="GITenberg/Pride-and-Prejudice_1342", commit="81db45c9c48c592f0b77f01fc59e677ad0a5634e",
         path="1342-0.txt", pg=1342, start=r"^\s*Chapter 1\s*$", size=56000, unwrap=True),
    dict(id="holmes", kind="prose", lang="en", title="The Adventures of Sherlock Holmes",
         author="Arthur Conan Doyle", repo="GITenberg/The-Adventures-of-Sherlock-Holmes_1661",
         commit="7e5dd2703fbf503c004063e96ab7c61262375e5f", path="1661-8.txt", pg=1661,
         start=r"^ADVENTURE I\. A SCANDAL IN BOHEMIA", size=56000, unwrap=True),
    dict(id="moby", kind="prose", lang="en", title="Moby Dick; Or, The Whale", author="Herman Melville",
         repo="GITenberg/Moby-Dick--Or-The-Whale_2701", commit="bdf1948e6cd00963730971e5624e764a35f238c3",
         path="2701-0.txt", pg=2701, start=r"^CHAPTER 1\. Loomings", start_nth=2, size=44000, unwrap=True),
    dict(id="twocities", kind="prose", lang="en", title="A Tale of Two Cities", author="Charles Dickens",
         repo="GITenberg/A-Tale-of-Two-Cities_98", commit="0f6111bc7237af7375295ec1754c2e57e19f67f1",
         path="98-0.txt", pg=98, start=r"^I\. The Period", size=44000, unwrap=True),
    dict(id="alice", kind="prose", lang="en", title="Alice's Adventures in Wonderland", author="Lewis Carroll",
         repo="GITenberg/Alice-s-Adventures-in-Wonderland_11", commit="7f18748e114b994d5d9454d5793581bc0b9cf9d7",
         path="11-0.txt", pg=11, start=r"^CHAPTER I\. Down the Rabbit-Hole", size=36000, unwrap=True),
    dict(id="frankenstein", kind="prose", lang="en", title="Frankenstein; Or, The Modern Prometheus",
         author="Mary Wollstonecraft Shelley", repo="GITenberg/Frankenstein_84",
         commit="c98a483bd1f34e7366126b81bcedd1a6faee636e", path="84-0.txt", pg=84,
         start=r"^Letter 1\s*$", start_nth=2, size=44000, unwrap=True),
    dict(id="sawyer", kind="prose", lang="en", title="The Adventures of Tom Sawyer", author="Mark Twain",
         repo="GITenberg/The-Adventures-of-Tom-Sawyer_74", commit="9b4174649064f197ca27895d98806b4a8659722b",
         path="74-0.txt", pg=74, start=r"^CHAPTER I\s*$", size=44000, unwrap=True),
    dict(id="eyre", kind="prose", lang="en", title="Jane Eyre: An Autobiography", author="Charlotte Brontë",
         repo="GITenberg/Jane-Eyre_1260", commit="d8976a3c05269fb2ecb83d4575d82c6c2abe0012",
         path="1260.txt", pg=1260, start=r"^CHAPTER I\s*$", size=44000, unwrap=True),
    dict(id="timemachine", kind="prose", lang="en", title="The Time Machine", author="H. G. Wells",
         repo="GITenberg/The-Time-Machine_35", commit="154a5c628743bd7d35d1af0fc4bcc017f0e111e1",
         path="35-0.txt", pg=35, start=r"^\s*I\s*$", size=36000, unwrap=True),
    dict(id="darkness", kind="prose", lang="en", title="Heart of Darkness", author="Joseph Conrad",
         repo="GITenberg/Heart-of-Darkness_526", commit="e8eeab5f8c2b587ab60eb5c3ad732f491eef64b1",
         path="526.txt", pg=526, start=r"^The Nellie, a cruising yawl", size=36000, unwrap=True),
    dict(id="grimm", kind="prose", lang="en", title="Grimms' Fairy Tales (tr. Edgar Taylor and Marian Edwardes)",
         author="Jacob and Wilhelm Grimm", repo="GITenberg/Grimms-Fairy-Tales_2591",
         commit="9991a30953853be9b40751408c3ad0d3af314fb7", path="2591-0.txt", pg=2591,
         start=r"^THE GOLDEN BIRD\s*$", size=36000, unwrap=True),
    # ---------------------------------------------------------------- English dialogue (plays)
    dict(id="earnest", kind="dialogue", lang="en", title="The Importance of Being Earnest", author="Oscar Wilde",
         repo="GITenberg/The-Importance-of-Being-Earnest--A-Trivial-Comedy-for-Serious-People_844",
         commit="61f653818ec74dda8cffc09970c32316264998ea", path="844.txt", pg=844,
         start=r"^FIRST ACT\s*$", size=52000, unwrap=True),
    dict(id="pygmalion", kind="dialogue", lang="en", title="Pygmalion", author="George Bernard Shaw",
         repo="GITenberg/Pygmalion_3825", commit="58c6b8b5a135dd1fa394f84c8d6b6a48a23b6a02",
         path="3825.txt", pg=3825, start=r"^ACT I\s*$", size=50000, unwrap=True),
    dict(id="hamlet", kind="dialogue", lang="en", title="Hamlet, Prince of Denmark", author="William Shakespeare",
         repo="GITenberg/Hamlet-Prince-of-Denmark_1524", commit="a22cf334eff1f3d8920cd11a0979a649a38a02d1",
         path="1524-0.txt", pg=1524, start=r"^ACT I\s*$", size=50000, unwrap=False),
    dict(id="dollshouse", kind="dialogue", lang="en", title="A Doll's House (tr. William Archer)",
         author="Henrik Ibsen", repo="GITenberg/A-Doll-s-House---a-play_2542",
         commit="3e53b32cec50d80ccde53d113ff938a4d60a1322", path="2542.txt", pg=2542,
         start=r"^ACT I\s*$", size=46000, unwrap=True),
    # ---------------------------------------------------------------- factual / statistical
    dict(id="factbook", kind="factual", lang="en", title="The 2002 CIA World Factbook",
         author="United States Central Intelligence Agency", repo="GITenberg/The-2002-CIA-World-Factbook_6344",
         commit="1bea778579cf26654d7e6713c822d9ff561adb41", path="6344.txt", pg=6344, fmt="factbook",
         countries=["Brazil", "Japan", "Kenya", "Norway", "India", "Peru", "Egypt", "Canada", "Germany"],
         size=180000, unwrap=True,
         license="US Government work, public domain; Project Gutenberg eBook #6344, Gutenberg header, footer "
                 "and license boilerplate removed"),
    dict(id="eb_chile", kind="factual", lang="en",
         title="Encyclopaedia Britannica, 11th Edition, Volume 6, Slice 2 (article CHILE, opening sections)",
         author="various contributors (1910-1911)",
         repo="GITenberg/Encyclopaedia-Britannica-11th-Edition-Volume-6-Slice-2-Chicago-University-of--to--Chiton-_31329",
         commit="3d13f95d857af2725ed771f7bec1c8b086ff1dc6", path="31329-8.txt", pg=31329,
         start=r"^CHILE, or CHILI", size=90000, unwrap=True),
    dict(id="eb_bulgaria", kind="factual", lang="en",
         title="Encyclopaedia Britannica, 11th Edition, Volume 4, Part 4 (article BULGARIA, continued)",
         author="various contributors (1910-1911)",
         repo="GITenberg/Encyclopaedia-Britannica-11th-Edition-Volume-4-Part-4-Bulgaria--to--Calgary-_19846",
         commit="bed27ce1c42f35541b6e46d2b72fde15df7b5290", path="19846-8.txt", pg=19846,
         start=r"^BULGARIA \(_continued", size=80000, unwrap=True),
    dict(id="census", kind="factual", lang="en", title="The 1990 United States Census (summary tables)",
         author="United States Census Bureau", repo="GITenberg/The-1990-United-States-Census_29",
         commit="b4bf60ed635a17ed16bae338369d645a140f52ce", path="29.txt", pg=29,
         start=r"^1990 Census of Population and Housing", size=30000, unwrap=False,
         license="US Government work, public domain; Project Gutenberg eBook #29, Gutenberg header, footer "
                 "and license boilerplate removed"),
    dict(id="wells", kind="factual", lang="en", title="A Short History of the World (opening chapters)",
         author="H. G. Wells", repo="GITenberg/A-Short-History-of-the-World_35461",
         commit="f2ea8e6bca83b40e7446f8478b292359d2f6e5d6", path="35461-8.txt", pg=35461,
         start=r"^THE WORLD IN SPACE\s*$", size=28000, unwrap=True),
    dict(id="wells_dates", kind="factual", lang="en", title="A Short History of the World (Chronological Table)",
         author="H. G. Wells", repo="GITenberg/A-Short-History-of-the-World_35461",
         commit="f2ea8e6bca83b40e7446f8478b292359d2f6e5d6", path="35461-8.txt", pg=35461,
         start=r"^CHRONOLOGICAL TABLE\s*$", size=16000, unwrap=True),
    # ---------------------------------------------------------------- the project's own code and docs
    dict(id="docs", kind="code", lang="en/markdown", title="autoround.cpp documentation (README.md, docs/*.md)",
         author="autoround.cpp contributors", repo="(this repository)", commit=PROJECT_COMMIT, fmt="project",
         files=["README.md", "docs/ARCHITECTURE.md", "docs/quantization.md", "docs/tokenizers.md",
                "docs/parallel.md"],
         license="autoround.cpp's own source, same terms as the project"),
    dict(id="src", kind="code", lang="C++", title="autoround.cpp source (src/**/*.cpp, *.h)",
         author="autoround.cpp contributors", repo="(this repository)", commit=PROJECT_COMMIT, fmt="project",
         files=["src/core/dtype.cpp", "src/core/thread_pool.cpp", "src/core/context.cpp", "src/core/tensor.h",
                "src/io/safetensors.cpp", "src/io/gguf.cpp", "src/io/atomic_file.cpp", "src/io/json_file.cpp",
                "src/io/text_source.cpp", "src/kernels/cpu/matmul.cpp", "src/kernels/cpu/attention.cpp",
                "src/kernels/cpu/rmsnorm.cpp", "src/kernels/cpu/rope.cpp", "src/kernels/cpu/exp.cpp",
                "src/kernels/ref/attention_ref.h", "src/model/tokenizer/bpe.cpp",
                "src/model/tokenizer/hf_bpe.cpp", "src/model/tokenizer/sentencepiece.cpp",
                "src/model/tokenizer/unicode.cpp", "src/model/config.cpp", "src/model/loader.cpp",
                "src/model/transformer.cpp", "src/quant/qdq.cpp", "src/quant/qdq_ref.h",
                "src/quant/signround.h", "src/quant/signround.cpp", "src/quant/calib.cpp",
                "src/pipeline/resume_state.cpp", "src/export/shard_writer.cpp", "src/eval/perplexity.cpp",
                "src/cli/commands.cpp", "src/parallel/plan.cpp",
                "src/pipeline/quantize.cpp", "src/model/model_check.cpp", "src/io/llama2c.cpp"],
         license="autoround.cpp's own source, same terms as the project"),
    # ---------------------------------------------------------------- other languages
    dict(id="bovary", kind="lang", lang="fr", genre="novel", title="Madame Bovary", author="Gustave Flaubert",
         repo="GITenberg/Madame-Bovary_14155", commit="defa45e6414550caa8293881e586bfcfbceadc67",
         path="14155-8.txt", pg=14155, start=r"^Nous étions à l'Étude", size=40000, unwrap=True),
    dict(id="verwandlung", kind="lang", lang="de", genre="novella", title="Die Verwandlung", author="Franz Kafka",
         repo="GITenberg/Die-Verwandlung_22367", commit="dd2beec59176851bfb071689539d6091b3d95d11",
         path="22367-8.txt", pg=22367, start=r"^Als Gregor Samsa", size=40000, unwrap=True),
    dict(id="quijote", kind="lang", lang="es", genre="novel",
         title="El ingenioso hidalgo don Quijote de la Mancha", author="Miguel de Cervantes Saavedra",
         repo="GITenberg/Don-Quijote_2000", commit="7879f2c1653ec515d125f49b177c3ef7f596bc3f",
         path="2000-8.txt", pg=2000, start=r"En un lugar de la Mancha", size=40000, unwrap=True),
    dict(id="promessi", kind="lang", lang="it", genre="novel", title="I promessi sposi",
         author="Alessandro Manzoni", repo="GITenberg/I-promessi-sposiOpere-di-Alessando-Manzoni-vol.-1_45334",
         commit="23ffc3b1fc19597281dbaddba774a20d25306afe", path="45334-8.txt", pg=45334,
         start=r"^Quel ramo del lago di Como", size=40000, unwrap=True),
    dict(id="casmurro", kind="lang", lang="pt", genre="novel", title="Dom Casmurro", author="Machado de Assis",
         repo="GITenberg/Dom-Casmurro_55752", commit="61bc683465086ab39778e69673e89171c0f84ee5",
         path="55752-8.txt", pg=55752, start=r"^\s*I\s*$", size=40000, unwrap=True),
    dict(id="dama", kind="lang", lang="ru", genre="story", title="Дама с собачкой (The Lady with the Dog)",
         author="Anton Chekhov", repo="d0rj/RusLit", commit="4509680428729da225a73a22008133660f92bb7e",
         path="prose/Chekhov/Дама с собачкой.txt", fmt="plain", size=40000, unwrap=False,
         license="public domain (author died 1904); the repository states that all its works are in the "
                 "public domain"),
    dict(id="lunyu", kind="lang", lang="zh", genre="classic (dialogues)", title="论语 (The Analects)",
         author="Confucius and disciples", repo="chinese-poetry/chinese-poetry",
         commit="99ebbef7e1345c0985c44b9fd96a3f9e776f117b", path="论语/lunyu.json", fmt="lunyu", size=40000,
         license="ancient text, public domain; JSON compilation under the MIT License (c) 2016 JackeyGao"),
    dict(id="botchan", kind="lang", lang="ja", genre="novel", title="坊っちゃん (Botchan), opening chapters",
         author="Natsume Soseki", repo="aozorahack/aozorabunko_text",
         commit="0984f7dc18a2270bdfd2ff99bf14fd1b3ebb4f65",
         path="cards/000148/files/752_ruby_2438/752_ruby_2438.txt", fmt="aozora", size=30000,
         license="public domain (published 1906, author died 1916); Aozora Bunko text, ruby and editorial "
                 "markup removed"),
    dict(id="luke", kind="lang", lang="el", genre="scripture (Koine Greek)",
         title="Κατὰ Λουκᾶν (Gospel of Luke), Robinson-Pierpont Byzantine Textform",
         author="Maurice A. Robinson and William G. Pierpont (eds.)", repo="byztxt/byzantine-majority-text",
         commit="27a45ff1b7be6c17ccbfeac414f3f55732ae8e28", path="csv-unicode/ccat/no-variants/LUK.csv",
         fmt="byz", heading="ΚΑΤΑ ΛΟΥΚΑΝ", size=46000,
         license="public domain (released to the public domain by the editors; repository under the Unlicense)",
         note="the editors ask that their names, the title (The New Testament in the Original Greek: Byzantine "
              "Textform, 2005) and their disclaimer accompany reproductions: permitted use or reproduction of "
              "the text does not imply doctrinal or theological agreement by the editors with the views of "
              "whoever reproduces it"),
    dict(id="mousquetaires", kind="lang", lang="fr", genre="novel (dialogue-heavy)", title="Les trois mousquetaires",
         author="Alexandre Dumas", repo="GITenberg/Les-trois-mousquetaires_13951",
         commit="a6a59868e5290f2b286fc39bdc36220e17fb8358", path="13951-8.txt", pg=13951,
         start=r"^LES TROIS PRÉSENTS DE M\. D'ARTAGNAN PÈRE", size=40000, unwrap=True),
    dict(id="effi", kind="lang", lang="de", genre="novel", title="Effi Briest", author="Theodor Fontane",
         repo="GITenberg/Effi-Briest_5323", commit="ad711db620a52853f8191bfd1a66e45fda0e51be",
         path="5323-8.txt", pg=5323, start=r"^In Front des schon seit Kurfürst", size=32000, unwrap=True),
    dict(id="marianela", kind="lang", lang="es", genre="novel", title="Marianela", author="Benito Pérez Galdós",
         repo="GITenberg/Marianela_17340", commit="4e67b60bc38da27e1fcdfbc995ca2dd9863e5d05",
         path="17340-8.txt", pg=17340, start=r"^\s*-?I-?\s*$", size=32000, unwrap=True),
    dict(id="commedia", kind="lang", lang="it", genre="verse", title="La Divina Commedia (Inferno, opening cantos)",
         author="Dante Alighieri", repo="GITenberg/La-Divina-Commedia-di-Dante-Complete_1000",
         commit="8ae2f78662ccc3f635a76e25a3f2463459cc1c6a", path="1000-0.txt", pg=1000,
         start=r"Nel mezzo del cammin", size=24000, unwrap=False),
    dict(id="lusiadas", kind="lang", lang="pt", genre="verse", title="Os Lusíadas (Canto I, opening stanzas)", author="Luís de Camões",
         repo="GITenberg/Os-Lus-adas_3333", commit="622e600b9786f83b117a1770eeb45e4be1b0a9fc",
         path="3333-8.txt", pg=3333, start=r"As armas e os bar", size=20000, unwrap=False),
    dict(id="vishnevy", kind="lang", lang="ru", genre="play", title="Вишнёвый сад (The Cherry Orchard), opening of act 1",
         author="Anton Chekhov", repo="d0rj/RusLit", commit="4509680428729da225a73a22008133660f92bb7e",
         path="prose/Chekhov/Вишнёвый сад.txt", fmt="plain", start=r"^\s*Действующие лица", size=30000,
         unwrap=False,
         license="public domain (author died 1904); the repository states that all its works are in the "
                 "public domain"),
    dict(id="guwen", kind="lang", lang="zh", genre="classical prose", title="古文觀止 (Guwen Guanzhi), first essays",
         author="various (Zuo zhuan, Guoyu and others; anthology by Wu Chucai and Wu Diaohou, 1694)",
         repo="chinese-poetry/chinese-poetry", commit="99ebbef7e1345c0985c44b9fd96a3f9e776f117b",
         path="蒙学/guwenguanzhi.json", fmt="guwen", size=24000,
         license="ancient text, public domain; JSON compilation under the MIT License (c) 2016 JackeyGao"),
    dict(id="rashomon", kind="lang", lang="ja", genre="story", title="羅生門 (Rashomon)",
         author="Akutagawa Ryunosuke", repo="aozorahack/aozorabunko_text",
         commit="0984f7dc18a2270bdfd2ff99bf14fd1b3ebb4f65",
         path="cards/000879/files/127_ruby_150/127_ruby_150.txt", fmt="aozora", size=30000,
         license="public domain (published 1915, author died 1927); Aozora Bunko text, ruby and editorial "
                 "markup removed"),
    dict(id="faust", kind="lang", lang="de", genre="verse drama", title="Faust. Der Tragödie erster Teil",
         author="Johann Wolfgang von Goethe", repo="GITenberg/Faust--Der-Trag-die-erster-Teil_2229",
         commit="bc4c77935b76f32905baeb68449b01f61301aa3b", path="2229-8.txt", pg=2229,
         start=r"^\s*Nacht\.?\s*$", size=24000, unwrap=False),
    dict(id="pikovaya", kind="lang", lang="ru", genre="story", title="Пиковая дама (The Queen of Spades)",
         author="Alexander Pushkin", repo="d0rj/RusLit", commit="4509680428729da225a73a22008133660f92bb7e",
         path="prose/Pushkin/Пиковая дама.txt", fmt="plain", size=16000, unwrap=False,
         license="public domain (author died 1837); the repository states that all its works are in the "
                 "public domain"),
    dict(id="tangshi", kind="lang", lang="zh", genre="verse", title="唐詩三百首 (Three Hundred Tang Poems), first poems",
         author="various Tang poets (anthology by Sun Zhu, 1763)", repo="chinese-poetry/chinese-poetry",
         commit="99ebbef7e1345c0985c44b9fd96a3f9e776f117b", path="蒙学/tangshisanbaishou.json", fmt="tangshi",
         size=12000, license="ancient text, public domain; JSON compilation under the MIT License (c) 2016 "
                             "JackeyGao"),
    dict(id="yabu", kind="lang", lang="ja", genre="story (testimonies)", title="藪の中 (In a Grove)",
         author="Akutagawa Ryunosuke", repo="aozorahack/aozorabunko_text",
         commit="0984f7dc18a2270bdfd2ff99bf14fd1b3ebb4f65",
         path="cards/000879/files/179_ruby_168/179_ruby_168.txt", fmt="aozora", size=40000,
         license="public domain (published 1922, author died 1927); Aozora Bunko text, ruby and editorial "
                 "markup removed"),
    dict(id="kumo", kind="lang", lang="ja", genre="story", title="蜘蛛の糸 (The Spider's Thread)",
         author="Akutagawa Ryunosuke", repo="aozorahack/aozorabunko_text",
         commit="0984f7dc18a2270bdfd2ff99bf14fd1b3ebb4f65",
         path="cards/000879/files/92_ruby_164/92_ruby_164.txt", fmt="aozora", size=20000,
         license="public domain (published 1918, author died 1927); Aozora Bunko text, ruby and editorial "
                 "markup removed"),
]

KIND_ORDER = ["prose", "lang", "factual", "code", "dialogue"]
KIND_NAMES = {"own": "project's own calibration text", "prose": "prose (novels, stories)",
              "dialogue": "dialogue (plays)", "factual": "encyclopedic / factual / statistical",
              "code": "code and docs (this project)", "lang": "other languages"}


# ------------------------------------------------------------------------------------------ git access
class Sources:
    def __init__(self, mirrors, overrides, project_root):
        self.mirrors, self.overrides, self.project_root = mirrors, overrides, project_root

    def git_dir(self, repo):
        if repo in self.overrides:
            return self.overrides[repo]
        base = os.path.join(self.mirrors or "", repo.replace("/", "+"), "repo")
        return os.path.join(base, ".git") if os.path.isdir(os.path.join(base, ".git")) else base

    def blob(self, repo, commit, path):
        if repo == "(this repository)":
            cmd = ["git", "-C", self.project_root, "cat-file", "blob", f"{commit}:{path}"]
        else:
            gd = self.git_dir(repo)
            if not os.path.isdir(gd):
                sys.exit(f"build_corpus: no git dir for {repo} (looked at {gd}); see --mirrors / --repo")
            cmd = ["git", "--git-dir", gd, "cat-file", "blob", f"{commit}:{path}"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0:
            sys.exit(f"build_corpus: cannot read {repo} {commit}:{path}: {r.stderr.decode(errors='replace')}")
        return r.stdout


# ------------------------------------------------------------------------------------------ cleaning
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\u2028\u2029\ufffe\uffff]")


def decode_legacy(data):
    """UTF-8 if it decodes, else Windows-1252 (a superset of the declared ISO-8859-1 in practice)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def norm_newlines(s):
    return s.replace("\r\n", "\n").replace("\r", "\n")


def paragraphs(text):
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def unwrap_para(p):
    """Join a hard-wrapped prose paragraph into one line; leave verse, tables and indented blocks alone."""
    lines = p.split("\n")
    if len(lines) < 2:
        return p
    if any(l[:1] in (" ", "\t") for l in lines) or any("   " in l for l in lines):
        return p
    if any(len(l) < 45 for l in lines[:-1]):
        return p
    return " ".join(l.strip() for l in lines)


DROP_PARA = re.compile(r"project gutenberg|gutenberg\.org|gutenberg-tm|transcriber|^produced by|"
                       r"distributed proofread|online distributed|www\.|https?://|e-?text prepared|"
                       r"\[illustration", re.I | re.M)


def pg_body(raw):
    text = norm_newlines(decode_legacy(raw))
    s = re.search(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG EBOOK.*$", text, re.M | re.I)
    e = re.search(r"^\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG EBOOK.*$", text, re.M | re.I)
    if not s or not e:
        raise ValueError("no Project Gutenberg START/END markers")
    return text[s.end():e.start()]


PAGE_MARK = re.compile(r" ?\{\d+\}")  # page numbers such as {430}
ITALICS = re.compile(r"(?<![\w_])_([^_]{1,3000}?)_(?![\w_])")  # Gutenberg's _italics_ markup


def clean_paras(paras, unwrap):
    out = []
    for p in paras:
        if DROP_PARA.search(p):
            continue
        p = textwrap.dedent("\n".join(l.rstrip() for l in p.split("\n")))
        if unwrap:
            p = unwrap_para(p)
        p = PAGE_MARK.sub("", ITALICS.sub(r"\1", p)).strip()
        if p:
            out.append(p)
    return out


def take(paras, size):
    """Leading paragraphs up to about `size` bytes of UTF-8 (stops at a paragraph boundary)."""
    out, n = [], 0
    for p in paras:
        b = len(p.encode("utf-8")) + 2
        if out and n + b > size:
            break
        out.append(p)
        n += b
    return out


def start_at(text, piece):
    pat = piece.get("start")
    if not pat:
        return text
    ms = list(re.finditer(pat, text, re.M))
    nth = piece.get("start_nth", 1)
    if len(ms) < nth:
        raise ValueError(f"start pattern {pat!r} (#{nth}) not found")
    return text[ms[nth - 1].start():]


def aozora(raw):
    text = norm_newlines(raw.decode("cp932"))
    lines = text.split("\n")
    head = [l for l in lines[:3] if l.strip()][:2]  # title, author
    # The notation legend sits between two rules of dashes after the title; the colophon starts at 底本.
    rules = [i for i, l in enumerate(lines[:40]) if re.fullmatch(r"-{20,}", l.strip())]
    body = lines[rules[1] + 1:] if len(rules) >= 2 else lines[len(head):]
    body = "\n".join(body)
    body = body.split("\n底本：")[0]
    body = re.sub(r"※?［＃[^］]*］", "", body)   # editorial notes and gaiji descriptions
    body = re.sub(r"《[^》]*》", "", body)       # ruby readings
    body = body.replace("｜", "")
    paras = [l.rstrip() for l in body.split("\n") if l.strip()]
    return ["\n".join(head)] + paras


# ------------------------------------------------------------------------------------------ per format
def piece_units(src, piece):
    """The piece's cleaned text as a list of units (paragraphs, or whole files for code)."""
    fmt = piece.get("fmt", "pg")
    size = piece["size"] if "size" in piece else None
    if fmt == "project":
        units = []
        for f in piece["files"]:
            body = norm_newlines(src.blob(piece["repo"], piece["commit"], f).decode("utf-8")).strip("\n")
            if f.endswith((".cpp", ".h")):
                body = f"// {f}\n{body}"
            units.append(finish(body))
        return units
    raw = src.blob(piece["repo"], piece["commit"], piece["path"])
    if fmt == "pg":
        text = start_at(pg_body(raw), piece)
        units = clean_paras(paragraphs(text), piece.get("unwrap", False))
    elif fmt == "factbook":
        text = pg_body(raw)
        entries = re.split(r"\n=+\n", text)
        units = []
        for c in piece["countries"]:
            ent = [e for e in entries if e.strip().split("\n", 1)[0].strip() == c]
            if not ent:
                raise ValueError(f"factbook: no entry for {c}")
            ps = clean_paras(paragraphs(ent[0]), True)
            ps = [p for p in ps if not p.startswith("This page was last updated")]
            units += take(ps, piece["size"] // len(piece["countries"]))
        size = None
    elif fmt == "plain":
        text = start_at(norm_newlines(raw.decode("utf-8")), piece)
        units = []  # one paragraph a line; runs of short lines (verse, stage lines) stay together
        for l in (l.strip() for l in text.split("\n")):
            if not l:
                continue
            if units and len(l) < 60 and len(units[-1].split("\n")[-1]) < 60:
                units[-1] += "\n" + l
            else:
                units.append(l)
    elif fmt == "aozora":
        units = aozora(raw)
    elif fmt == "lunyu":
        units = []
        for ch in json.loads(raw.decode("utf-8")):
            units.append(ch["chapter"])
            units += [p.strip() for p in ch["paragraphs"] if p.strip()]
    elif fmt == "guwen":
        data = json.loads(raw.decode("utf-8"))
        units = []
        for vol in data["content"]:
            for art in vol["content"]:
                units.append(f"{art['chapter']}（{art.get('source') or ''}{art.get('author') or ''}）".replace("（）", ""))
                units += [p.strip() for p in art["paragraphs"] if p.strip()]
    elif fmt == "tangshi":
        data = json.loads(raw.decode("utf-8"))
        units = []
        for sec in data["content"]:
            units.append(sec["type"])
            for poem in sec["content"]:
                units.append(f"{poem['chapter']}　{poem.get('author') or ''}\n" + "\n".join(poem["paragraphs"]))
    elif fmt == "byz":
        import csv
        import io
        rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
        units, cur, verses = [piece["heading"]], None, []
        for r in rows:
            if r["chapter"] != cur and verses:
                units.append(" ".join(verses))
                verses = []
            cur = r["chapter"]
            verses.append(r["text"].strip())
        if verses:
            units.append(" ".join(verses))
    else:
        raise ValueError(f"unknown fmt {fmt}")
    units = [finish(u) for u in units]
    units = [u for u in units if u.strip()]
    return take(units, size) if size else units


def finish(s):
    s = unicodedata.normalize("NFC", s)
    s = CONTROL.sub("", s)
    s = "\n".join(l.rstrip() for l in s.split("\n"))
    s = re.sub(r"\n{4,}", "\n\n\n", s)
    return s.replace(")AR_CORPUS", ") AR_CORPUS")


# ------------------------------------------------------------------------------------------ assembly
def chunks_of(units, target):
    out, cur, n = [], [], 0
    for u in units:
        b = len(u.encode("utf-8")) + 2
        if cur and n + b > target:
            out.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(u)
        n += b
    if cur:
        out.append("\n\n".join(cur))
    return out


def round_robin(lists):
    out, i = [], 0
    while any(i < len(l) for l in lists):
        out += [l[i] for l in lists if i < len(l)]
        i += 1
    return out


def build(src):
    own = finish(norm_newlines(src.blob("(this repository)", PROJECT_COMMIT,
                                        "src/quant/corpus/builtin.txt").decode("utf-8")).strip("\n"))
    per_piece = {}
    for p in MANIFEST:
        try:
            per_piece[p["id"]] = chunks_of(piece_units(src, p), CHUNK)
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            sys.exit(f"build_corpus: piece {p['id']}: {e}")
    queues = {}
    for k in KIND_ORDER:
        ids = [p["id"] for p in MANIFEST if p["kind"] == k]
        queues[k] = [(pid, c) for pid, c in round_robin([[(i, c) for c in per_piece[i]] for i in ids])]
    totals = {k: sum(len(c.encode("utf-8")) for _, c in q) for k, q in queues.items()}
    emitted = {k: 0 for k in KIND_ORDER}
    order = [("own", own)]
    while any(queues.values()):
        k = min((k for k in KIND_ORDER if queues[k]), key=lambda k: (emitted[k] / totals[k], KIND_ORDER.index(k)))
        pid, c = queues[k].pop(0)
        emitted[k] += len(c.encode("utf-8"))
        order.append((pid, c))
    text = "\n\n".join(c for _, c in order) + "\n"
    sizes = {}
    for pid, c in order:
        sizes[pid] = sizes.get(pid, 0) + len(c.encode("utf-8"))
    return text, sizes, [pid for pid, _ in order]


def validate(text):
    data = text.encode("utf-8")
    data.decode("utf-8")  # round trip
    bad = CONTROL.search(text)
    if bad:
        sys.exit(f"build_corpus: control character U+{ord(bad.group()):04X} at {bad.start()}")
    if ")AR_CORPUS" in text:
        sys.exit("build_corpus: forbidden sequence )AR_CORPUS present")
    if re.search(r"project gutenberg", text, re.I):
        sys.exit("build_corpus: a reference to Project Gutenberg survived cleaning")
    if "\n\n\n\n" in text:
        sys.exit("build_corpus: more than two consecutive blank lines")


def notice(sizes, total):
    L = []
    L.append("autoround.cpp built-in calibration corpus (builtin.txt): sources and licenses")
    L.append("=" * 78)
    L.append("")
    L.append("builtin.txt is generated by tools/build_corpus.py from pinned commits of the repositories")
    L.append("below (see the script's docstring to rebuild it). Every piece is an excerpt, cleaned (line")
    L.append("endings normalised to LF, hard-wrapped prose paragraphs joined, control characters removed,")
    L.append("Unicode NFC), cut into ~16 kB chunks at paragraph boundaries and interleaved with the other")
    L.append("pieces; the byte counts below are of the cleaned text in builtin.txt.")
    L.append("")
    L.append("Texts from Project Gutenberg (via the GITenberg mirrors on GitHub) are public-domain works in")
    L.append("the USA. Their Project Gutenberg headers, footers, license boilerplate, producer credits and")
    L.append("transcriber's notes were removed, and no reference to Project Gutenberg remains in the corpus")
    L.append('text: the Project Gutenberg License allows copying and redistributing a public-domain eBook')
    L.append('"as long as all references to Project Gutenberg are removed"; "Project Gutenberg" is a')
    L.append("registered trademark and is named here only to state the origin. Outside the USA the status")
    L.append("follows the authors' dates: the named authors and translators of the literary works all died")
    L.append("before 1951 (most before 1930); the Britannica volumes were published in 1910-1911; the")
    L.append("Factbook and Census texts are US Government works; the Greek text was dedicated to the public")
    L.append("domain by its editors; the Chinese texts are ancient.")
    L.append("")
    L.append(f"Total size: {total} bytes (UTF-8).")
    L.append("")
    L.append(f"[own] The project's original calibration text (src/quant/corpus/builtin.txt at {PROJECT_COMMIT[:12]})")
    L.append(f"    kind: {KIND_NAMES['own']}; language: en; bytes: {sizes['own']}")
    L.append("    license: autoround.cpp's own text, same terms as the project")
    L.append("")
    for p in MANIFEST:
        L.append(f"[{p['id']}] {p['title']} -- {p['author']}")
        kind = KIND_NAMES[p["kind"]] + (f" ({p['genre']})" if p.get("genre") else "")
        L.append(f"    kind: {kind}; language: {p['lang']}; bytes: {sizes.get(p['id'], 0)}")
        if p.get("fmt") == "project":
            L.append(f"    source: this repository at commit {p['commit']}, files:")
            for i in range(0, len(p["files"]), 3):
                L.append("      " + ", ".join(p["files"][i:i + 3]))
        else:
            L.append(f"    source: github.com/{p['repo']} path {p['path']} commit {p['commit']}")
        if p.get("pg"):
            L.append(f"    note: {PG_REPO_NOTE}")
        if p.get("note"):
            L.append(f"    note: {p['note']}")
        lic = p.get("license") or PG_LICENSE.format(pg=p.get("pg"))
        L.append(f"    license: {lic}")
        L.append("")
    return "\n".join(L)


def report(sizes, total):
    by_kind, by_lang = {}, {}
    for pid, n in sizes.items():
        p = next((q for q in MANIFEST if q["id"] == pid), None)
        kind = p["kind"] if p else "own"
        lang = p["lang"] if p else "en"
        lang = "en" if lang.startswith("en") else lang
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_lang[lang] = by_lang.get(lang, 0) + n
    print(f"total: {total} bytes")
    for name, d in (("kind", by_kind), ("language", by_lang)):
        print(f"by {name}:")
        for k, n in sorted(d.items(), key=lambda kv: -kv[1]):
            print(f"  {k:10s} {n:9d}  {100.0 * n / total:5.1f}%")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", help="folder holding <owner>+<name>/repo git dirs of the sources")
    ap.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GITDIR",
                    help="git dir of one source repository (overrides --mirrors for it)")
    ap.add_argument("--out", default=os.path.join(root, "src/quant/corpus/builtin.txt"))
    ap.add_argument("--notice", default=os.path.join(root, "src/quant/corpus/NOTICE"))
    ap.add_argument("--check", action="store_true", help="compare with the existing files instead of writing")
    ap.add_argument("--dump", metavar="ID", help="print one piece's cleaned text and exit")
    a = ap.parse_args()
    overrides = dict(r.split("=", 1) for r in a.repo)
    src = Sources(a.mirrors, overrides, root)
    if a.dump:
        p = next(q for q in MANIFEST if q["id"] == a.dump)
        sys.stdout.write("\n\n".join(piece_units(src, p)) + "\n")
        return 0
    text, sizes, order = build(src)
    validate(text)
    total = len(text.encode("utf-8"))
    note = notice(sizes, total) + "\n"
    if a.check:
        same = all(os.path.exists(f) and open(f, "rb").read() == t.encode("utf-8")
                   for f, t in ((a.out, text), (a.notice, note)))
        print("up to date" if same else "differs")
        return 0 if same else 1
    for f, t in ((a.out, text), (a.notice, note)):
        with open(f, "wb") as fh:
            fh.write(t.encode("utf-8"))
    report(sizes, total)
    print(f"{len(order)} chunks, in order: " + " ".join(order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
