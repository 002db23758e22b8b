"""Search by meaning, and fine-tuning for it: notebook 11's collections, baselines and measures.

**Search** (``search_corpus``): 320 short documents written for this course, 40 in each of 8
topics (cooking, health, travel, computing, sport, money, gardening, home), each with one query
that asks for it in other words: "How do I stop my bike chain squeaking?" for "Oil the links of
a bicycle chain regularly to keep it quiet and free of rust.". Only about a tenth of a query's
content words appear in its document (``mean_word_overlap``), so a keyword engine (``TfIdf``)
has little to go on; documents of one topic compete with one another, so the right topic is not
enough for recall@1. ``compare_search`` measures recall@k for a sentence encoder, TF-IDF and the
same architecture with random weights (``random_encoder``).

**Fine-tuning** (``finetune_domain``): the help pages of an invented company whose twelve
internal tools have invented names ("Quillon" is the expenses system, "Brellix" books holidays).
The pages name the tools and never say what they are for; employees ask in plain words. A
model that has never met the names can read the *action* a query asks about (reset a password,
cancel an entry) but not the *tool*, and ``fine_tune`` on (query, page) pairs teaches it the
names. See ``finetune_domain`` for the design that makes the held-out measure honest.

Vectors are compared by dot product: rows of unit length (``BertEncoder.encode``, ``TfIdf``)
make it the cosine similarity. Shapes: Q queries, N documents, D features.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib import resources

import torch
import torch.nn.functional as F

from ._checks import check_rank
from .encoder import EncoderLayer
from .minilm import BertConfig, BertEncoder, contrastive_loss, skip_init, without_onednn
from .pretraining import AdamW
from .wordpiece import Encoding, WordPieceTokenizer

__all__ = [
    "STOPWORDS",
    "content_words",
    "word_overlap",
    "mean_word_overlap",
    "SearchCorpus",
    "search_corpus",
    "recall_at_k",
    "TfIdf",
    "search",
    "random_encoder",
    "SearchComparison",
    "compare_search",
    "TOOLS",
    "ACTIONS",
    "FineTuneDomain",
    "finetune_domain",
    "DomainRecall",
    "domain_recall",
    "FINE_TUNE_STEPS",
    "LORA_RANK",
    "fine_tune",
    "finetune_report",
]

# --- words ---------------------------------------------------------------------------------

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing don down during each few for
    from further get got had has have having he her here hers herself him himself his how i if
    in into is it its itself just let me more most much my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves s t d ll m re ve isn doesn won didn wouldn shouldn haven hasn aren
    wasn""".split()
)
"""Function words left out of ``content_words``: articles, pronouns, auxiliaries, question
words, prepositions and the pieces of contractions ("don't" is "don" and "t")."""

_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    """A crude suffix stripper, so that "bake", "baking", "baked" and "bakes" are one word (and
    "knees" is "knee", "potatoes" "potato"). Deliberately small: it only has to keep
    ``word_overlap`` from missing shared words and give ``TfIdf`` the usual help."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "ches", "shes", "xes", "oes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # "stopped" -> "stop", "running" -> "run"
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def content_words(text: str) -> list[str]:
    """The words that carry a text's content, as a keyword engine sees them: lowercased, split
    on everything that is not a letter or a digit (punctuation stripped), ``STOPWORDS`` left out,
    suffixes stripped (``_stem``).

    >>> content_words("How do I stop my bike chain squeaking?")
    ['stop', 'bik', 'chain', 'squeak']
    """
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def word_overlap(query: str, document: str) -> float:
    """The share of ``query``'s content words that also appear in ``document`` (0 for a query
    without content words)."""
    words = content_words(query)
    if not words:
        return 0.0
    in_document = set(content_words(document))
    return sum(w in in_document for w in words) / len(words)


# --- the search collection -----------------------------------------------------------------


@dataclass(frozen=True)
class SearchCorpus:
    """Documents, queries and which document each query asks for.

    Attributes:
        documents: N texts.
        topics: N topic names, one per document.
        queries: Q texts.
        targets: Q indices into ``documents``: query i asks for ``documents[targets[i]]``.
    """

    documents: list[str]
    topics: list[str]
    queries: list[str]
    targets: list[int]

    @property
    def topic_names(self) -> list[str]:
        """The topics in the order they first appear."""
        return list(dict.fromkeys(self.topics))


def search_corpus() -> SearchCorpus:
    """Notebook 11's search collection (``encoder_lib/data/search_corpus.tsv``): 320 documents in
    8 topics, one query each, written for this course. The same every time (no randomness)."""
    path = resources.files("encoder_lib").joinpath("data/search_corpus.tsv")
    documents, topics, queries = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            topic, document, query = line.split("\t")
            topics.append(topic)
            documents.append(document)
            queries.append(query)
    return SearchCorpus(documents, topics, queries, list(range(len(queries))))


def mean_word_overlap(corpus: SearchCorpus) -> float:
    """The mean over queries of ``word_overlap(query, its document)``."""
    pairs = zip(corpus.queries, corpus.targets, strict=True)
    return sum(word_overlap(q, corpus.documents[t]) for q, t in pairs) / len(corpus.queries)


# --- measures and baselines ----------------------------------------------------------------


def recall_at_k(
    query_vectors: torch.Tensor,
    doc_vectors: torch.Tensor,
    targets: Sequence[int] | torch.Tensor,
    k: int,
) -> float:
    """The share of queries whose target document is among the ``k`` documents with the largest
    dot product with the query. Ties count against the query: a target must beat all but at most
    k - 1 of the other documents, so a query whose scores are all equal (a TF-IDF query that
    shares no word with any document) is never a hit.

    Args:
        query_vectors: ``(Q, D)``.
        doc_vectors: ``(N, D)``.
        targets: ``(Q,)`` indices into the N documents.
        k: how many results count, 1 <= k <= N.
    """
    check_rank("query_vectors", query_vectors, "(Q, D)")
    check_rank("doc_vectors", doc_vectors, "(N, D)")
    targets = torch.as_tensor(targets, dtype=torch.long, device=query_vectors.device)
    Q, N = query_vectors.shape[0], doc_vectors.shape[0]
    if query_vectors.shape[1] != doc_vectors.shape[1]:
        raise ValueError(
            "query_vectors (Q, D) and doc_vectors (N, D) must have the same D, got "
            f"{tuple(query_vectors.shape)} and {tuple(doc_vectors.shape)}"
        )
    if targets.shape != (Q,):
        raise ValueError(f"targets must have shape (Q,) = ({Q},), got {tuple(targets.shape)}")
    if Q and (targets.min() < 0 or targets.max() >= N):
        raise ValueError(f"targets must be indices of the N = {N} documents")
    if not 1 <= k <= N:
        raise ValueError(f"k must be between 1 and N = {N}, got {k}")
    scores = query_vectors @ doc_vectors.T  # (Q, N)
    target_scores = scores.gather(1, targets[:, None])  # (Q, 1)
    others_as_good = (scores >= target_scores).sum(dim=1) - 1  # (Q,), the target left out
    return float((others_as_good < k).double().mean())


class TfIdf:
    r"""The classic keyword engine: a text is a vector with one entry per word of the
    documents' vocabulary, *term frequency* (how often the word occurs in the text) times
    *inverse document frequency* (how rare the word is among the documents), scaled to unit
    length. Words are ``content_words``; a word no document contains is ignored.

    .. math:: \mathrm{idf}(w) = \ln\frac{1 + N}{1 + \mathrm{df}(w)} + 1

    with N documents, df(w) of which contain w (scikit-learn's smoothed default). Two texts
    score high when they share words, rare words counting most: "chain" says more than "keep".

    Shape:
        ``tfidf(texts)``: Q texts -> ``(Q, V)`` unit rows (all zeros for a text with no known
        word), V the size of ``vocabulary``.
    """

    def __init__(self, documents: Sequence[str]):
        if isinstance(documents, str):
            raise TypeError("TfIdf takes a list of documents, got a single string")
        counts = Counter(w for d in documents for w in set(content_words(d)))
        self.vocabulary = {w: i for i, w in enumerate(sorted(counts))}
        n = len(documents)
        df = torch.tensor([counts[w] for w in self.vocabulary], dtype=torch.float64)
        self.idf = (torch.log((1 + n) / (1 + df)) + 1).float()  # (V,)

    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        if isinstance(texts, str):
            raise TypeError("a TfIdf takes a list of texts; wrap a single one in a list")
        tf = torch.zeros(len(texts), len(self.vocabulary))  # (Q, V)
        for i, text in enumerate(texts):
            for word, count in Counter(content_words(text)).items():
                if word in self.vocabulary:
                    tf[i, self.vocabulary[word]] = count
        return F.normalize(tf * self.idf, dim=1)  # (Q, V)


def search(
    query: str,
    encode: Callable[[Sequence[str]], torch.Tensor],
    doc_vectors: torch.Tensor,
    k: int = 5,
) -> list[tuple[int, float]]:
    """The ``k`` best documents for ``query``: ``(index, score)`` pairs, best first.

    Args:
        query: the text to search for.
        encode: turns a list of texts into vectors, e.g. ``model.encode`` or a ``TfIdf``.
        doc_vectors: ``(N, D)``, the documents encoded by the same ``encode``.
        k: how many results, at most N.
    """
    check_rank("doc_vectors", doc_vectors, "(N, D)")
    scores = doc_vectors @ encode([query])[0]  # (N,)
    top = scores.topk(min(k, len(scores)))
    return list(zip(top.indices.tolist(), top.values.tolist(), strict=True))


class _OnlyTheseTokens:
    """A tokenizer whose ids are renumbered 0..n-1 over the tokens ``texts`` use (every other
    token becomes 0, which ``random_encoder``'s model is never asked about)."""

    def __init__(self, tokenizer: WordPieceTokenizer, texts: Sequence[str]):
        self.tokenizer = tokenizer
        used = {tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.unk_id}
        for text in texts:
            used.update(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))
        self.new_id = torch.zeros(len(tokenizer), dtype=torch.long)
        self.new_id[sorted(used)] = torch.arange(len(used))
        self.size = len(used)

    def __call__(self, texts: Sequence[str]) -> Encoding:
        batch = self.tokenizer(texts)
        return Encoding(self.new_id[batch.input_ids], batch.attention_mask, batch.token_type_ids)


def random_encoder(
    tokenizer: WordPieceTokenizer,
    seed: int = 0,
    config: BertConfig | None = None,
    texts: Sequence[str] | None = None,
) -> BertEncoder:
    """The same architecture as all-MiniLM-L6-v2 (``BertConfig()``) and the same tokenizer, with
    random weights: what the model would be without its training. In eval mode.

    The weights follow ``random_bert_weights``' recipe (normal, mean 0, standard deviation 0.02
    for the embeddings, 1 / sqrt(fan_in) for each weight matrix, 0.1 for biases and LayerNorm
    offsets; LayerNorm gains 1 + N(0, 0.1)), drawn in float32 straight into the model's tensors.

    Args:
        texts: if given, the model can encode only these texts, and its word table holds a row
            only for the tokens they use (about 2,000 of 30,522 for the search collection): the
            rows of other tokens, independent random vectors never looked up, would cost 47 MB
            and change nothing. Free the model with ``del`` once its vectors are made.
    """
    config = BertConfig() if config is None else config
    if texts is not None:
        tokenizer = _OnlyTheseTokens(tokenizer, texts)
        config = replace(config, vocab_size=tokenizer.size)
    with skip_init():  # every parameter is set below
        # One layer, then the others built one by one: the encoder would make them by copying
        # the first, which fills 35 MB that the block below at once replaces.
        model = BertEncoder(replace(config, num_layers=1), tokenizer)
        model.encoder.layers.extend(
            EncoderLayer(
                config.d_model, config.num_heads, config.d_ff, 0.1, "gelu", False, config.eps
            )
            for _ in range(config.num_layers - 1)
        )
    model.config, model.encoder.num_layers = config, config.num_layers
    # Every parameter a view of one block (46 MB at MiniLM's size): memory allocated in one
    # piece that large comes straight from the operating system and goes back to it whole when
    # the model is freed, where a hundred separate tensors are carved from the process's heap,
    # and what is allocated after them can keep the heap from shrinking when they are freed.
    block = torch.empty(sum(p.numel() for p in model.parameters()))
    views, start = {}, 0
    for name, p in model.named_parameters():
        views[name] = block[start : start + p.numel()].view_as(p)
        start += p.numel()
    model.load_state_dict(views, assign=True)
    del block, views
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("embeddings.") and p.dim() == 2:  # the three lookup tables
                p.normal_(0.0, 0.02, generator=generator)
            elif p.dim() == 2:  # (out, in): std 1 / sqrt(in)
                p.normal_(0.0, p.shape[1] ** -0.5, generator=generator)
            elif "norm" in name and name.endswith("weight"):  # LayerNorm gains
                p.normal_(1.0, 0.1, generator=generator)
            else:  # biases, LayerNorm offsets
                p.normal_(0.0, 0.1, generator=generator)
    return model.eval()


@dataclass(frozen=True)
class SearchComparison:
    """Recall@k of three systems on one collection (``compare_search``); ``str`` gives one line
    per k.

    Attributes:
        n_queries, n_documents: the collection's size (chance recall@k is k / n_documents).
        recall: system name -> {k: recall@k}; systems "MiniLM", "TF-IDF", "random encoder".
        overlap: ``mean_word_overlap`` of the collection.
    """

    n_queries: int
    n_documents: int
    recall: dict[str, dict[int, float]]
    overlap: float

    def line(self, k: int) -> str:
        systems = ", ".join(f"{name} {r[k]:.1%}" for name, r in self.recall.items())
        return f"retrieval recall@{k} ({self.n_queries} queries): {systems}"

    def __str__(self) -> str:
        ks = next(iter(self.recall.values()))
        chance = ", ".join(f"recall@{k} {k / self.n_documents:.1%}" for k in ks)
        return "\n".join(
            [self.line(k) for k in ks]
            + [f"chance: {chance}; query words found in their document: {self.overlap:.1%}"]
        )


def compare_search(
    corpus: SearchCorpus,
    trained_vectors: tuple[torch.Tensor, torch.Tensor],
    random_vectors: tuple[torch.Tensor, torch.Tensor],
    ks: Sequence[int] = (1, 5),
) -> SearchComparison:
    """Recall@k of the trained encoder ("MiniLM"), of ``TfIdf`` over ``corpus.documents`` and of
    the same architecture with random weights ("random encoder").

    Args:
        trained_vectors, random_vectors: each encoder's ``(query_vectors (Q, D), doc_vectors
            (N, D))`` for ``corpus.queries`` and ``corpus.documents``, made by the caller (so
            that a model can be freed as soon as its vectors exist: ``random_encoder``).
    """
    tfidf = TfIdf(corpus.documents)
    systems = {
        "MiniLM": trained_vectors,
        "TF-IDF": (tfidf(corpus.queries), tfidf(corpus.documents)),
        "random encoder": random_vectors,
    }
    recall = {
        name: {k: recall_at_k(q, d, corpus.targets, k) for k in ks}
        for name, (q, d) in systems.items()
    }
    return SearchComparison(
        len(corpus.queries), len(corpus.documents), recall, mean_word_overlap(corpus)
    )


# --- the fine-tuning domain: an invented company's help pages ------------------------------

TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Quillon": (
        (
            "the expenses system",
            "the tool for claiming back money I spent for work",
            "the place where I submit receipts for reimbursement",
            "the reimbursement tool",
            "the page where I log money I paid out of my own pocket for the company",
        ),
        (
            "the app that pays me back for business costs",
            "the site for getting refunded after a client dinner",
        ),
    ),
    "Brellix": (
        (
            "the holiday booking tool",
            "the system where I ask for days off",
            "the annual leave planner",
            "the tool for booking time away from work",
            "the page where I record my leave",
        ),
        ("the app where I request vacation days", "the place I put in for time off work"),
    ),
    "Tamsk": (
        (
            "the VPN",
            "the software for reaching the office network from home",
            "the remote connection tool",
            "the work-from-home connection",
            "the app that connects my laptop to the office from outside",
        ),
        (
            "the thing that lets me work from home on internal sites",
            "the secure tunnel into the company network",
        ),
    ),
    "Oropel": (
        (
            "the payslip portal",
            "the system that shows my salary",
            "the payroll site",
            "the salary statements site",
            "the page where I download my pay slip",
        ),
        ("the place where I see how much I was paid", "the app with my monthly wage statements"),
    ),
    "Vindra": (
        (
            "the meeting room booking system",
            "the tool for reserving a conference room",
            "the room calendar",
            "the room reservation tool",
            "the page where I book a meeting space",
        ),
        (
            "the app for grabbing a space to hold a meeting",
            "the site where I book somewhere for a team discussion",
        ),
    ),
    "Skelp": (
        (
            "the equipment ordering system",
            "the place to request a new laptop",
            "the hardware shop for staff",
            "the IT equipment catalogue",
            "the page where I ask for a new phone or headset",
        ),
        (
            "the app for getting a replacement monitor or keyboard",
            "the site where I order a work computer",
        ),
    ),
    "Farnic": (
        (
            "the password vault",
            "the tool where the team keeps shared logins",
            "the credentials manager",
            "the shared password store",
            "the page where we keep login details for team accounts",
        ),
        (
            "the place where we store secret keys and passwords",
            "the app holding the team's account passwords",
        ),
    ),
    "Grenwick": (
        (
            "the visitor registration system",
            "the tool for signing in guests at reception",
            "the guest pass system",
            "the guest sign-in tool",
            "the page where I register someone visiting the office",
        ),
        (
            "the app for inviting an outside visitor to the office",
            "the place to get a badge for someone coming to see me",
        ),
    ),
    "Ostrum": (
        (
            "the car park permit system",
            "the tool for getting a parking space",
            "the parking app",
            "the parking reservation tool",
            "the page where I apply for a parking permit",
        ),
        (
            "the place where I register my car to park at work",
            "the site for reserving a spot for my vehicle",
        ),
    ),
    "Zephan": (
        (
            "the business travel booking tool",
            "the system for buying train and plane tickets for work trips",
            "the corporate travel site",
            "the trip booking site",
            "the page where I book hotels and flights for business",
        ),
        (
            "the app for booking a flight to visit a client",
            "the place to reserve a hotel for a conference trip",
        ),
    ),
    "Kivet": (
        (
            "the IT helpdesk",
            "the system for reporting a broken computer to tech support",
            "the support ticket tool",
            "the tech support portal",
            "the page where I raise a ticket when my computer breaks",
        ),
        ("the place where I log a technical problem", "the app for asking IT to fix something"),
    ),
    "Lorrow": (
        (
            "the training course catalogue",
            "the system for signing up to workshops",
            "the learning portal",
            "the course booking site",
            "the page where I sign up for training",
        ),
        (
            "the site for enrolling in a professional course",
            "the app where I find classes to improve my skills",
        ),
    ),
}
"""Tool name -> (descriptions used in training queries, descriptions kept for held-out
queries): what an employee calls the tool when they do not know its name."""

ACTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "access": (
        (
            "New starters are given a {T} account once their line manager approves the access "
            "request.",
            "Access to {T} is granted by your team lead; ask them to add you and wait for the "
            "welcome email.",
            "To start using {T}, open the staff portal, choose Request access and pick your "
            "department.",
        ),
        ("How do I get access to {d}?", "I'm new here; how do I get an account for {d}?"),
        (
            "Who can give me permission to use {d}?",
            "I just joined the company and can't open {d} yet; what should I do?",
        ),
    ),
    "password": (
        (
            "Reset a lost {T} password from the sign-in page with Forgot password; the link "
            "expires after an hour.",
            "After five failed sign-ins {T} locks your account for thirty minutes; it then "
            "unlocks itself.",
            "If {T} rejects your login, use the single sign-on button instead of typing a "
            "separate password.",
        ),
        ("I forgot my password for {d}.", "How do I reset my login for {d}?"),
        ("I'm locked out of {d} after too many attempts.", "My password for {d} stopped working."),
    ),
    "cancel": (
        (
            "A {T} entry can be withdrawn with the Retract button until it has been approved.",
            "To undo a submission in {T}, open it, press Edit and save it as a draft again.",
            "Approved {T} items cannot be deleted; raise a correction entry that reverses them.",
        ),
        (
            "How do I cancel something I submitted in {d}?",
            "I made a mistake in {d}; can I undo it?",
        ),
        (
            "Can I withdraw a request I already sent through {d}?",
            "How do I take back an entry in {d}?",
        ),
    ),
    "phone": (
        (
            "{T} has an app for iOS and Android; sign in with your staff email.",
            "{T} works in a phone's browser, but there is no separate app to install.",
            "Install {T} from the company app store on your work mobile; personal phones are not "
            "supported.",
        ),
        ("Can I use {d} on my phone?", "Is there a mobile app for {d}?"),
        ("How do I get {d} on my smartphone?", "Does {d} work on an iPhone or Android?"),
    ),
    "broken": (
        (
            "When {T} shows an error, take a screenshot and post it in the {t}-help channel.",
            "{T} outages are announced on the status page; if it is not listed there, call "
            "extension 4400.",
            "If {T} will not load, clear your browser cache first; most {T} errors disappear "
            "after that.",
        ),
        ("{d} is down; who do I tell?", "I get an error message in {d}; what should I do?"),
        ("{d} is not loading for me.", "Who do I contact when {d} crashes?"),
    ),
    "timing": (
        (
            "{T} requests are usually handled within two working days.",
            "Anything entered in {T} after the 25th is processed the following month.",
            "{T} approvals happen every Monday morning, so allow up to a week.",
        ),
        (
            "How long does a request in {d} take to be approved?",
            "Is there a deadline for {d} each month?",
        ),
        (
            "When is the cut-off date for {d}?",
            "How many days until something I put in {d} gets processed?",
        ),
    ),
}
"""Action -> (three page templates, ``{T}`` the tool's name and ``{t}`` it in lower case;
training question frames; held-out question frames), ``{d}`` a description from ``TOOLS``."""


@dataclass(frozen=True)
class FineTuneDomain:
    """The invented company's help pages and the questions asked about them
    (``finetune_domain``).

    Attributes:
        documents: 72 pages, one per (tool, action).
        tools, actions: each page's tool name and action.
        train_pairs: (query, page) pairs for ``fine_tune``.
        held_out_queries: questions never trained on, about pages no training query asks for.
        held_out_targets: the index in ``documents`` of each held-out query's page.
    """

    documents: list[str]
    tools: list[str]
    actions: list[str]
    train_pairs: list[tuple[str, str]]
    held_out_queries: list[str]
    held_out_targets: list[int]


def _question(frame: str, description: str) -> str:
    text = frame.format(d=description)
    return text[0].upper() + text[1:]


def finetune_domain() -> FineTuneDomain:
    """The help pages of an invented company, and questions about them in plain words.

    **The pages.** Twelve tools with invented names (``TOOLS``: "Quillon" is the expenses
    system, "Ostrum" the parking permits) and six actions (``ACTIONS``: get access, password,
    cancel an entry, use on a phone, it is broken, how long it takes): one page per (tool,
    action), 72 pages. A page names its tool and never says what the tool is for, as a real
    company's pages do ("A Quillon entry can be withdrawn with the Retract button until it has
    been approved."). Each action has three page templates; tools take turns through them, so
    pages of one action differ by their wording for a third of the tools and *only* by the
    tool's name for the rest.

    **The questions** describe the tool instead of naming it ("How do I cancel something I
    submitted in the expenses system?"). An encoder that has never met "Quillon" reads the
    action (cancelling) and not the tool: the best it can do is guess among the twelve pages of
    that action.

    **The split.** Each tool keeps two of its six actions out of training, so that each action is
    held out for four tools (tool i holds out actions i mod 6 and (i + 3) mod 6): 48 pages have
    training questions, 24 have none. Training questions combine the tool's five training
    descriptions with the action's two training frames (10 per page, 480 pairs). Held-out
    questions ask for the 24 pages no training question asks for, with the tool's two held-out
    descriptions and the action's two held-out frames, wordings never seen in training (4 per
    page, 96 queries). To answer them a model must have learnt what the *name* means, from
    questions about the tool's other actions, and combine it with an action it reads in new
    words. Recall is measured over all 72 pages.

    The same every time (no randomness).
    """
    documents, tools, actions = [], [], []
    for i, tool in enumerate(TOOLS):
        for action, (templates, _, _) in ACTIONS.items():
            documents.append(templates[i % 3].format(T=tool, t=tool.lower()))
            tools.append(tool)
            actions.append(action)
    names = list(ACTIONS)
    train_pairs, held_out_queries, held_out_targets = [], [], []
    for i, (train_descriptions, held_out_descriptions) in enumerate(TOOLS.values()):
        held_out_actions = {names[i % 6], names[(i + 3) % 6]}
        for j, (action, (_, train_frames, held_out_frames)) in enumerate(ACTIONS.items()):
            page = i * len(ACTIONS) + j
            if action in held_out_actions:
                for frame in held_out_frames:
                    for description in held_out_descriptions:
                        held_out_queries.append(_question(frame, description))
                        held_out_targets.append(page)
            else:
                for frame in train_frames:
                    for description in train_descriptions:
                        train_pairs.append((_question(frame, description), documents[page]))
    return FineTuneDomain(
        documents, tools, actions, train_pairs, held_out_queries, held_out_targets
    )


@dataclass(frozen=True)
class DomainRecall:
    """How well a model finds the held-out queries' pages (``domain_recall``).

    Attributes:
        recall_at_1, recall_at_5: over all 72 pages.
        right_tool, right_action: the share of queries whose top page is about the right tool
            (whatever the action), and about the right action (whatever the tool).
        n_queries: how many held-out queries.
    """

    recall_at_1: float
    recall_at_5: float
    right_tool: float
    right_action: float
    n_queries: int


def domain_recall(model: BertEncoder, domain: FineTuneDomain) -> DomainRecall:
    """Recall of ``domain.held_out_queries`` over ``domain.documents`` with ``model.encode``."""
    doc_vectors = model.encode(domain.documents)  # (N, D)
    query_vectors = model.encode(domain.held_out_queries)  # (Q, D)
    targets = domain.held_out_targets
    top = (query_vectors @ doc_vectors.T).argmax(dim=1).tolist()  # (Q,)
    n = len(targets)
    return DomainRecall(
        recall_at_k(query_vectors, doc_vectors, targets, 1),
        recall_at_k(query_vectors, doc_vectors, targets, 5),
        sum(domain.tools[t] == domain.tools[g] for t, g in zip(top, targets, strict=True)) / n,
        sum(domain.actions[t] == domain.actions[g] for t, g in zip(top, targets, strict=True)) / n,
        n,
    )


# --- fine-tuning ---------------------------------------------------------------------------

FINE_TUNE_STEPS = 120
"""``fine_tune``'s default number of steps."""

LORA_RANK = 32
"""``fine_tune``'s default rank of the low-rank update."""


def _attention_half(layer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """An ``EncoderLayer`` up to its FFN sub-layer: ``(B, L, D) -> (B, L, D)``."""
    if layer.norm_first:
        return x + layer._sa_block(layer.norm1(x), mask)
    return layer.norm1(x + layer._sa_block(x, mask))


def _ffn_half(
    layer: torch.nn.Module, h: torch.Tensor, A: torch.Tensor, B: torch.Tensor
) -> torch.Tensor:
    """The rest of the layer, its FFN sub-layer, with ``W2 + B @ A`` in place of the FFN's second
    weight ``W2``: ``(..., D) -> (..., D)``, for A ``(r, d_ff)`` and B ``(D, r)``. The sum
    ``W2 + B @ A`` is never formed: ``u @ A.T @ B.T`` goes through the r-wide bottleneck."""

    def ffn(x: torch.Tensor) -> torch.Tensor:
        u = layer.dropout(layer.activation(layer.linear1(x)))  # (..., d_ff)
        return layer.linear2(u) + (u @ A.T) @ B.T  # W2 u + b2 + B (A u): (..., D)

    if layer.norm_first:
        return h + layer.dropout2(ffn(layer.norm2(h)))
    return layer.norm2(h + layer.dropout2(ffn(h)))


@torch.no_grad()
def _frozen_part(model: BertEncoder, texts: Sequence[str]) -> tuple[torch.Tensor, dict]:
    """The input of the top layer's FFN sub-layer at every real token of ``texts``: what the
    frozen embeddings, lower layers and top attention give, the same at every step, computed
    once. Returns ``(T, D)`` in float16 with the texts' tokens one after another (T tokens in
    all, no padding: one tensor, not one per text) and text -> ``(start, end)``, its rows."""
    layers = model.encoder.layers
    batch = model.tokenizer(list(texts))  # (N, L)
    lengths = batch.attention_mask.sum(dim=1)  # (N,)
    ends = lengths.cumsum(0).tolist()
    out = torch.empty(ends[-1], model.config.d_model, dtype=torch.float16)  # (T, D)
    for start in range(0, len(texts), 16):
        stop = min(start + 16, len(texts))
        width = int(lengths[start:stop].max())
        keep = batch.attention_mask[start:stop, :width]  # (B, L), True = real token
        x = model.embeddings(
            batch.input_ids[start:stop, :width], batch.token_type_ids[start:stop, :width]
        )  # (B, L, D)
        mask = keep[:, None, None, :]  # (B, 1, 1, L)
        for layer in layers[:-1]:
            x = layer(x, mask)
        x = _attention_half(layers[-1], x, mask)
        first = ends[start - 1] if start else 0
        out[first : ends[stop - 1]] = x[keep]  # (T_chunk, D), text after text
    starts = [0, *ends[:-1]]
    return out, {text: (s, e) for text, s, e in zip(texts, starts, ends, strict=True)}


def _embed(
    layer: torch.nn.Module,
    A: torch.Tensor,
    B: torch.Tensor,
    frozen: torch.Tensor,
    rows: dict,
    texts: Sequence[str],
) -> torch.Tensor:
    """Unit sentence vectors ``(B, D)`` with gradients through the low-rank update."""
    spans = [rows[t] for t in texts]
    index = torch.cat([torch.arange(s, e) for s, e in spans])  # (T,)
    y = _ffn_half(layer, frozen[index].float(), A, B)  # (T, D), text after text
    means = torch.stack([piece.mean(dim=0) for piece in y.split([e - s for s, e in spans])])
    return F.normalize(means, dim=-1)  # (B, D): the mean over real tokens, made unit length


def fine_tune(
    model: BertEncoder,
    pairs: Sequence[tuple[str, str]],
    *,
    steps: int = FINE_TUNE_STEPS,
    batch_size: int = 16,
    lr: float = 1e-3,
    rank: int = LORA_RANK,
    seed: int = 0,
    weight_decay: float = 0.01,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = contrastive_loss,
    progress: Callable[..., object] | None = None,
) -> list[float]:
    """Fine-tune ``model`` in place on (query, document) pairs with in-batch negatives, by a
    low-rank update (LoRA) of the weight that ends its top layer's feed-forward sub-layer.

    Each step draws ``batch_size`` *different* documents at random and one of each document's
    queries, encodes both sides with the model, and takes one AdamW step (``pretraining.AdamW``,
    ``torch.optim.AdamW``'s update written out, 70 MB lighter) on
    ``loss_fn(query_vectors, doc_vectors)``: every other document of the batch is a negative. (Two
    queries for one document in a batch would make that document a negative of its own query.)

    **What learns.** LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language
    Models") keeps the model's weights frozen and learns a change of low rank to some of them.
    Here it is the top layer's ``W2`` (D x d_ff, 384 x 1536), the matrix that turns the FFN's
    hidden units into each token's update: the layer computes with ``W2 + B @ A``, where ``A``
    ``(rank, d_ff)`` starts random and ``B`` ``(D, rank)`` starts at zero, so that training
    starts from the model as it is. Only ``A`` and ``B`` learn: rank x (d_ff + D) numbers (61,440
    at rank 32, against 589,824 in ``W2`` and 1.8 million in the layer), so their gradients and
    AdamW's two running averages take 0.7 MB instead of the 21 MB they would take for the whole
    layer. At the end ``B @ A`` is added into ``W2``: the model keeps its shape and speed, and
    nothing else in it has changed.

    **What runs.** Everything before ``W2`` that has no trained part ahead of it runs once: the
    embeddings, the lower layers and the top layer's attention give, for every text of
    ``pairs``, the same vectors at every step, so they are computed before the first step
    (stored in float16: 7 MB for the company's 528 texts, the training seeing each value
    rounded to about three significant digits). A step runs only the top layer's FFN and its
    LayerNorm on the batch's tokens, packed one text after another without padding (the FFN
    treats each token alone, so nothing needs masking), then the mean over each text's tokens;
    and backpropagation only has ``A``, ``B`` and what comes after ``W2`` to go through. Dropout
    is off (the model stays in eval mode).

    Args:
        model: a ``BertEncoder`` with its tokenizer.
        pairs: (query, document) texts; a document may have several queries.
        steps, batch_size, lr, weight_decay: the optimisation (a constant learning rate).
        rank: the rank of the update (r above).
        seed: seeds the one generator ``A`` and the batches are drawn from; the same seed gives
            the same losses and weights.
        loss_fn: ``(queries (B, D), documents (B, D)) -> scalar``; the library's
            ``contrastive_loss`` (scale 20) by default.
        progress: a tqdm-like factory (``tqdm.auto.tqdm``): called as
            ``progress(total=steps, desc=...)``, then ``update``, ``set_postfix``, ``close``.

    Returns:
        the loss of every step.
    """
    queries_of: dict[str, list[str]] = {}
    for query, document in pairs:
        queries_of.setdefault(document, []).append(query)
    documents = list(queries_of)
    if not 2 <= batch_size <= len(documents):
        raise ValueError(
            f"batch_size must be between 2 and the number of different documents in pairs "
            f"({len(documents)}), got {batch_size}"
        )
    top = model.encoder.layers[-1]
    d_model, d_ff = top.linear2.weight.shape
    if not 1 <= rank <= d_model:
        raise ValueError(f"rank must be between 1 and d_model ({d_model}), got {rank}")
    generator = torch.Generator().manual_seed(seed)
    A = (torch.randn(rank, d_ff, generator=generator) / d_ff**0.5).requires_grad_()  # (r, d_ff)
    B = torch.zeros(d_model, rank, requires_grad=True)  # (D, r): W2 + B @ A = W2 at first
    was_training = model.training
    requires_grad = [p.requires_grad for p in model.parameters()]
    model.eval()  # no dropout
    model.requires_grad_(False)  # the model's own weights get no gradients
    optimizer = AdamW([A, B], lr=lr, weight_decay=weight_decay)  # torch.optim's, written out
    bar = progress(total=steps, desc="fine-tuning") if progress is not None else None
    losses = []
    try:
        with without_onednn():  # a new token count at every step: see minilm.without_onednn
            texts = list(dict.fromkeys([q for q, _ in pairs] + documents))
            frozen, rows = _frozen_part(model, texts)
            for _ in range(steps):
                chosen = torch.randperm(len(documents), generator=generator)[:batch_size].tolist()
                batch_documents = [documents[i] for i in chosen]
                picks = [
                    int(torch.randint(len(queries_of[d]), (1,), generator=generator))
                    for d in batch_documents
                ]
                batch_queries = [
                    queries_of[d][j] for d, j in zip(batch_documents, picks, strict=True)
                ]
                loss = loss_fn(
                    _embed(top, A, B, frozen, rows, batch_queries),
                    _embed(top, A, B, frozen, rows, batch_documents),
                )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{losses[-1]:.3f}")
        with torch.no_grad():  # W2 + B @ A, once: the model as it will be used
            top.linear2.weight.add_(B @ A)
    finally:
        if bar is not None:
            bar.close()
        for p, flag in zip(model.parameters(), requires_grad, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)
    return losses


def finetune_report(before: DomainRecall, after: DomainRecall, losses: Sequence[float]) -> str:
    """Three lines: held-out recall@1 and @5 before and after, the right tool and the right
    action before and after, and the loss at the first and last step."""
    return "\n".join(
        [
            f"held-out recall@1 ({after.n_queries} queries, {len(losses)} steps): "
            f"{before.recall_at_1:.1%} before, {after.recall_at_1:.1%} after; recall@5 "
            f"{before.recall_at_5:.1%} -> {after.recall_at_5:.1%}",
            f"top page about the right tool: {before.right_tool:.1%} -> {after.right_tool:.1%}; "
            f"about the right action: {before.right_action:.1%} -> {after.right_action:.1%}",
            f"contrastive loss: {losses[0]:.3f} at the first step, {losses[-1]:.3f} at the last",
        ]
    )
