"""The server's web page (`GET /`) in a real headless Chromium: translations with their alternatives and scores, a
server error, an alignment picture, and the input and results of the other export kinds.

The server runs in a background thread on a free port with fake exports, so these tests take seconds on every
backend. `python tests/serving/test_page.py docs/serve_page.png` saves the README's screenshot of the page.
"""

import asyncio
import contextlib
import os
import sys
import threading

import pytest
from aiohttp import web
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from keras_seq.serving import engines, server

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
    reason=f"needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver",
)
WAIT_SECONDS = 30
# A result the page draws again between finding an element and reading it: the wait looks again.
REDRAWN = (StaleElementReferenceException,)


class NBestExport:
    """A stand-in for an export with `translate_options`: the k-th translation of a sentence is the sentence in
    capitals with ` (k)` after it, scored -(k + 1) / 2 with log probability -5 (k + 1) / 4; the log probability of a
    third translation is -inf (a dead beam), which the server sends as null."""

    def __init__(self, num_beams=4, max_length=10):
        import tensorflow as tf

        self.num_beams = tf.Variable(num_beams, dtype=tf.int32)
        self.max_length = tf.Variable(max_length, dtype=tf.int32)
        self.length_penalty = tf.Variable(0.6, dtype=tf.float32)

    def translate(self, sentences):
        raise AssertionError("an export with translate_options is served through it")

    translate_greedy = translate

    def translate_options(self, sentences, beam_size, n_best, length_penalty, min_length, max_length):
        import tensorflow as tf

        texts, n = [s.decode() for s in sentences.numpy()], int(n_best.numpy())
        log_prob = lambda k: float("-inf") if k == 2 else -1.25 * (k + 1)
        return {
            "translations": tf.constant([[translation(t, k) for k in range(n)] for t in texts], tf.string),
            "scores": tf.constant([[-0.5 * (k + 1) for k in range(n)] for _ in texts], tf.float32),
            "log_probs": tf.constant([[log_prob(k) for k in range(n)] for _ in texts], tf.float32),
        }


class PrefixExport(NBestExport):
    """`NBestExport` taking every option of `export.RUNTIME_OPTIONS` and a `target_prefix` per sentence: its one
    translation is the prefix, then the sentence in capitals, then the beam size and top-k that reached it."""

    def translate_options(
        self, sentences, beam_size, n_best, length_penalty, min_length, max_length, no_repeat_ngram_size,
        repetition_penalty, disable_unk, max_length_ratio, sampling_topk, sampling_topp, sampling_temperature, seed,
        target_prefix,
    ):  # fmt: skip
        import tensorflow as tf

        texts = [
            f"{prefix.decode()} {sentence.decode().upper()} beam={int(beam_size)} k={int(sampling_topk)}".strip()
            for sentence, prefix in zip(sentences.numpy(), target_prefix.numpy())
        ]
        return {
            "translations": tf.constant([[text] for text in texts], tf.string),
            "scores": tf.constant([[-1.0] for _ in texts], tf.float32),
            "log_probs": tf.constant([[-2.0] for _ in texts], tf.float32),
        }


def translation(sentence, k):
    return sentence.upper() + ("" if k == 0 else f" ({k})")


class PhrasebookEngine:
    """A fake translator engine answering from a phrasebook `{source: [(text, score, log_prob, alignment), ...]}`,
    the alignment a list per target word of weights over the source words, as an aligning export would give it."""

    kind, route, input_field, signatures = "translate", "translate", "sentences", ("translate",)
    option_fields, per_sentence_fields = ("beam_size", "n_best"), ()

    def __init__(self, phrasebook):
        self.phrasebook = phrasebook

    def parse_options(self, fields):
        return fields.get("n_best") or 1

    def run(self, sentences, n_best):
        return [
            {
                "translations": [
                    {"text": text, "score": score, "log_prob": log_prob, "alignment": alignment}
                    for text, score, log_prob, alignment in self.phrasebook[sentence][:n_best]
                ]
            }
            for sentence in sentences
        ]


class OneSignatureExport:
    """A stand-in for a classifier, tagger or language-model export: its one signature, computed from its input."""

    def classify(self, texts):
        import tensorflow as tf

        lengths = tf.cast(tf.strings.length(texts), tf.float32)[:, None]
        return {
            "label": tf.where(lengths[:, 0] > 1, "long", "short"),
            "probabilities": tf.concat([1 / (1 + lengths), lengths / (1 + lengths)], 1),
        }

    def tag(self, sentences):
        import tensorflow as tf

        return tf.strings.regex_replace(sentences, r"\S+", "X")

    def generate(self, prompts):
        import tensorflow as tf

        return tf.strings.join([prompts, "and so on"], separator=" ")


@contextlib.contextmanager
def serving(engine):
    """The URL of the page of a server of `engine`, running on its own event loop in a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(server.make_app(engine), access_log=None)

    async def start():
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner.addresses[0][1]

    try:
        port = asyncio.run_coroutine_threadsafe(start(), loop).result(WAIT_SECONDS)
        yield f"http://127.0.0.1:{port}/"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(WAIT_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_SECONDS)
        loop.close()


def chromium(width=1000, height=900):
    """A headless Chromium driven through the system's chromedriver (so Selenium Manager downloads nothing)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


def open_page(browser, url, kind="translate"):
    """Load the page and wait until it has asked `/health` for the export's kind."""
    browser.get(url)
    WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=REDRAWN).until(
        lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-kind")
    )
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-kind") == kind


def type_lines(browser, lines):
    box = browser.find_element(By.ID, "input")
    box.clear()
    box.send_keys("\n".join(lines))
    return box


def set_number(browser, element_id, value):
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(str(value))


def wait_for_results(browser, count):
    """The result items, once `count` are shown and the request is over."""
    WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=REDRAWN).until(
        lambda b: (
            len(b.find_elements(By.CSS_SELECTOR, "#results > .result")) == count
            and b.find_element(By.ID, "submit").is_enabled()
        )
    )
    return browser.find_elements(By.CSS_SELECTOR, "#results > .result")


def cells(row, selector="td"):
    return [cell.text for cell in row.find_elements(By.CSS_SELECTOR, selector)]


def test_two_sentences_show_their_best_translations_the_alternatives_and_their_scores(browser):
    sentences = ["the cat sleeps", "a dog"]
    with serving(engines.engine_for(NBestExport())) as url:
        open_page(browser, url)
        browser.get_log("browser")  # what loading logged: only this test's requests are checked below
        type_lines(browser, ["", *sentences, "  "])  # blank lines are skipped
        set_number(browser, "beam-size", 4)
        set_number(browser, "n-best", 3)
        browser.find_element(By.ID, "submit").click()
        results = wait_for_results(browser, 2)
        shown = [
            (
                item.find_element(By.CLASS_NAME, "source").text,
                item.find_element(By.CLASS_NAME, "best-translation").text,
                [cells(row) for row in item.find_elements(By.CSS_SELECTOR, "tbody tr.alternative")],
            )
            for item in results
        ]
        assert browser.find_element(By.ID, "error").is_displayed() is False
        severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert shown == [
        (
            sentence,
            translation(sentence, 0),
            [
                ["1", translation(sentence, 0), "-0.5", "-1.25"],
                ["2", translation(sentence, 1), "-1", "-2.5"],
                ["3", translation(sentence, 2), "-1.5", "-"],  # a log probability of null
            ],
        )
        for sentence in sentences
    ]
    assert severe == []


def test_the_prefix_and_sampling_controls_show_where_the_server_takes_them_and_reach_each_sentence(browser):
    with serving(engines.engine_for(NBestExport())) as url:  # an export without either option
        open_page(browser, url)
        assert not browser.find_element(By.ID, "target-prefix").is_displayed()
        assert not browser.find_element(By.ID, "sampling-topk").is_displayed()
    with serving(engines.engine_for(PrefixExport())) as url:
        open_page(browser, url)
        type_lines(browser, ["the cat sleeps", "a dog"])
        browser.find_element(By.ID, "target-prefix").send_keys("Le")
        set_number(browser, "sampling-topk", 5)
        browser.find_element(By.ID, "submit").click()
        best = [item.find_element(By.CLASS_NAME, "best-translation").text for item in wait_for_results(browser, 2)]
        assert best == ["Le THE CAT SLEEPS beam=1 k=5", "Le A DOG beam=1 k=5"]  # sampling asks for beam size 1
        set_number(browser, "sampling-topk", "")
        browser.find_element(By.ID, "target-prefix").clear()
        browser.find_element(By.ID, "submit").click()
        WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=REDRAWN).until(
            lambda b: b.find_element(By.CLASS_NAME, "best-translation").text == "THE CAT SLEEPS beam=4 k=1"
        )


def test_a_server_error_is_shown_and_goes_once_a_request_succeeds(browser):
    with serving(engines.engine_for(NBestExport(num_beams=4))) as url:
        open_page(browser, url)
        box = type_lines(browser, ["one", "two"])
        set_number(browser, "n-best", 5)
        box.send_keys(Keys.CONTROL, Keys.ENTER)  # the keyboard's way to send
        error = browser.find_element(By.ID, "error")
        WebDriverWait(browser, WAIT_SECONDS, ignored_exceptions=REDRAWN).until(lambda b: error.is_displayed())
        message = error.text
        assert browser.find_elements(By.CSS_SELECTOR, "#results > .result") == []
        set_number(browser, "n-best", 1)
        box.send_keys(Keys.CONTROL, Keys.ENTER)
        results = wait_for_results(browser, 2)
        assert [item.find_element(By.CLASS_NAME, "best-translation").text for item in results] == ["ONE", "TWO"]
        assert not error.is_displayed()
    assert message == "Error 400: n_best: expected an integer in [1, 4], got 5"


def diagonal(size, weight=0.7):
    """An alignment of `size` target words to `size` source words, each word mostly to the one in its place."""
    rest = (1 - weight) / (size - 1)
    return [[weight if i == j else rest for j in range(size)] for i in range(size)]


def test_an_alignment_is_drawn_as_a_grid_with_source_words_across_and_target_words_down(browser):
    crossed = [[0.1, 0.2, 0.7], [0.8, 0.1, 0.1], [0.0, 1.0, 0.0]]
    engine = PhrasebookEngine(
        {"the black cat": [("le chat noir", -0.25, -0.5, crossed), ("le chat", -1.0, -2.0, diagonal(2))]}
    )
    with serving(engine) as url:
        open_page(browser, url)
        type_lines(browser, ["the black cat"])
        set_number(browser, "n-best", 2)
        browser.find_element(By.ID, "submit").click()
        (item,) = wait_for_results(browser, 1)
        pictures = item.find_elements(By.CSS_SELECTOR, "details.alignment")
        assert [picture.get_attribute("open") for picture in pictures] == ["true", None]  # the best one's is open
        grid = pictures[0].find_element(By.CSS_SELECTOR, "svg.alignment-grid")
        assert grid.is_displayed() and grid.size["width"] > 0 and grid.size["height"] > 0
        across = [token.get_attribute("textContent") for token in grid.find_elements(By.CLASS_NAME, "source-token")]
        down = [token.get_attribute("textContent") for token in grid.find_elements(By.CLASS_NAME, "target-token")]
        shades = {
            (int(cell.get_attribute("data-row")), int(cell.get_attribute("data-column"))): float(
                cell.get_attribute("fill-opacity")
            )
            for cell in grid.find_elements(By.CSS_SELECTOR, "rect.weight")
        }
        second = pictures[1].find_elements(By.CSS_SELECTOR, "rect.weight")
    assert (across, down) == (["the", "black", "cat"], ["le", "chat", "noir"])
    assert shades == {(i, j): pytest.approx(crossed[i][j]) for i in range(3) for j in range(3)}
    assert len(second) == 4


@pytest.mark.parametrize(
    "signature, label, button, expected",
    [
        ("classify", "Texts to classify, one per line", "Classify", [["long", "0.25, 0.75"], ["short", "0.5, 0.5"]]),
        ("tag", "Sentences to tag, one per line", "Tag", [["X X X"], ["X"]]),
        ("generate", "Prompts, one per line", "Generate", [["abc de f and so on"], ["x and so on"]]),
    ],
)
def test_a_classifier_tagger_or_language_model_export_gets_its_own_input_and_results(
    browser, signature, label, button, expected
):
    export = type("Export", (), {signature: getattr(OneSignatureExport, signature)})()
    lines = ["abc", "x"] if signature == "classify" else ["abc de f", "x"]
    with serving(engines.engine_for(export)) as url:
        open_page(browser, url, kind={"generate": "lm"}.get(signature, signature))
        shown = (
            browser.find_element(By.ID, "input-label").text,
            browser.find_element(By.ID, "submit").text,
            browser.find_element(By.ID, "n-best").is_displayed(),
        )
        type_lines(browser, lines)
        browser.find_element(By.ID, "submit").click()
        results = wait_for_results(browser, 2)
        outputs = [
            [
                output.text.removeprefix("Probabilities by class: ")
                for output in item.find_elements(By.CSS_SELECTOR, ".output, .probabilities")
            ]
            for item in results
        ]
        sources = [item.find_element(By.CLASS_NAME, "source").text for item in results]
    assert shown == (label, button, False)
    assert sources == lines
    assert outputs == expected


def save_screenshot(export_dir, path):
    """A PNG of the page serving the export at `export_dir` (a translate recipe's run), translating the first
    sentences of the shipped corpus's test split with three alternatives each: the README's picture."""
    from keras_seq.data import corpora

    engine = engines.load_savedmodel(export_dir)
    sentences = [source for source, _ in corpora.software_en_fr("test")[:3]]
    driver = chromium(width=900, height=1000)
    try:
        with serving(engine) as url:
            open_page(driver, url)
            type_lines(driver, sentences)
            set_number(driver, "n-best", 3)
            driver.find_element(By.ID, "submit").click()
            wait_for_results(driver, len(sentences))
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(900, height + 140)  # the window's frame takes some of it
            driver.find_element(By.TAG_NAME, "main").screenshot(path)
    finally:
        driver.quit()


if __name__ == "__main__":
    save_screenshot(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "serve_page.png")
